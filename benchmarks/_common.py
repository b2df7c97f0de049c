"""What the benchmark scripts share: summaries of measured values, a process's memory,
a CPU hog to measure under and writing the result.

Every script runs as ``python benchmarks/<name>.py`` (``scripts/run_benchmarks.py`` does the
same from the repository root), so this directory is on ``sys.path`` and ``import _common``
finds this module; the leading underscore keeps ``run_benchmarks.py`` from running it.

One rule for all figures: values that are NaN or None (a round that produced no token, an
event that never came) are left out of a summary, whose count is of the values kept; a
summary of no values has None in every figure, and so has a ratio or a difference with a
missing operand (or a zero reference), so the JSON never holds NaN.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

# The figures a summary can hold; pNN is the NN-th percentile (linear interpolation).
_FIGURES = {
    "median": np.median,
    "p90": lambda a: np.percentile(a, 90),
    "p99": lambda a: np.percentile(a, 99),
    "min": np.min,
    "max": np.max,
}
CPU_HOG = Path(__file__).resolve().parents[1] / "scripts" / "cpu_hog.py"
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
# The spread of a latency: median, p90 and the extremes.
SPREAD = ("median", "p90", "min", "max")


def _finite(values: Iterable[float | None]) -> list[float]:
    """The values that are numbers (None and NaN left out), as floats."""
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def summary(
    values: Iterable[float | None],
    digits: int = 2,
    *,
    figures: Sequence[str] = ("median", "p90"),
    suffix: str = "",
    scale: float = 1.0,
    count: str | None = "n",
) -> dict[str, float | int | None]:
    """``figures`` of the finite values times ``scale``, each rounded to ``digits`` and named
    with ``suffix`` (``"_ms"``: ``median_ms``), and their number under ``count`` (None: not
    reported). None for every figure when no value is finite."""
    kept = np.asarray(_finite(values), dtype=np.float64) * scale
    out: dict[str, float | int | None] = {
        f"{name}{suffix}": round(float(_FIGURES[name](kept)), digits) if kept.size else None
        for name in figures
    }
    if count is not None:
        out[count] = int(kept.size)
    return out


def median(values: Iterable[float | None], digits: int = 2) -> float | None:
    """The median of the finite values, rounded; None when there is none."""
    return summary(values, digits, figures=("median",), count=None)["median"]


def ratio(value: float | None, reference: float | None, digits: int = 3) -> float | None:
    """``value / reference`` rounded; None when either is missing (None, NaN) or the
    reference is zero."""
    if (
        value is None
        or reference is None
        or math.isnan(value)
        or math.isnan(reference)
        or reference == 0
    ):
        return None
    return round(value / reference, digits)


def difference(value: float | None, reference: float | None, digits: int = 2) -> float | None:
    """``value - reference`` rounded; None when either is missing (None, NaN)."""
    if value is None or reference is None or math.isnan(value) or math.isnan(reference):
        return None
    return round(value - reference, digits)


def slope_per_hour(
    minutes: Sequence[float], values: Sequence[float], digits: int = 4
) -> float | None:
    """Least-squares slope of ``values`` against ``minutes``, per hour, rounded; None with
    fewer than two points."""
    if len(minutes) < 2:
        return None
    return round(float(np.polyfit(np.asarray(minutes), np.asarray(values), 1)[0] * 60.0), digits)


def rss_mb(pid: int | str = "self") -> float:
    """Resident set size of a process (this one by default) in MB of 2**20 bytes, from
    ``/proc/<pid>/statm``; FileNotFoundError when the process is gone."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * _PAGE_MB


def smaps_fields(pid: int | str, fields: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """kB of each of ``fields`` per mapping of a process, in one read of
    ``/proc/<pid>/smaps`` (``Rss`` what is resident, ``Size`` what is mapped). Keyed by the
    mapped file, ``[heap]``, ``[stack]``, or ``[anon] <start address>`` for anonymous
    mappings; FileNotFoundError when the process is gone."""
    tags = {f"{field}:": field for field in fields}
    result: dict[str, dict[str, int]] = {}
    name = ""
    with open(f"/proc/{pid}/smaps", encoding="ascii", errors="replace") as smaps:
        for line in smaps:
            words = line.split()
            if words and "-" in words[0] and len(words) >= 5 and not words[0].endswith(":"):
                name = words[5] if len(words) > 5 else f"[anon] {words[0].split('-')[0]}"
            elif words and words[0] in tags:
                kb = result.setdefault(name, dict.fromkeys(fields, 0))
                kb[tags[words[0]]] += int(words[1])
    return result


def smaps_rss(pid: int | str = "self") -> dict[str, int]:
    """Resident kB per mapping of a process (this one by default; :func:`smaps_fields`)."""
    return {name: kb["Rss"] for name, kb in smaps_fields(pid, ("Rss",)).items()}


def write_result(result: object, path: Path | None) -> None:
    """Print the result as indented JSON, and write it to ``path`` too when one is given
    (its directory is created)."""
    text = json.dumps(result, indent=2)
    print(text)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")


@contextlib.contextmanager
def cpu_hog(cores: int):
    """scripts/cpu_hog.py keeping ``cores`` cores busy; yields, then stops it and records
    what it used (``cpu_s`` against ``wall_s``: what it got of the cores) in the dict."""
    process = subprocess.Popen(
        [sys.executable, str(CPU_HOG), "--cores", str(cores)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    used: dict[str, float] = {}
    try:
        process.stderr.readline()  # its workers are started
        yield used
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        if process.returncode != 0:
            raise RuntimeError(f"cpu_hog failed:\n{err[-2000:]}")
        used.update(json.loads(out.strip().splitlines()[-1]))
