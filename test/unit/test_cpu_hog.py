"""scripts/cpu_hog.py: busy cores for a while or until Ctrl-C, a clean stop, bad input named."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "cpu_hog.py"
TIMEOUT_S = 60


def hog(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_it_stops_by_itself_after_the_duration():
    process = hog("--seconds", "0.5")
    out, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, err
    used = json.loads(out.splitlines()[-1])
    assert used["cores"] == 1 and used["wall_s"] >= 0.5 and used["cpu_s"] > 0


def test_ctrl_c_stops_every_worker_and_exits_0():
    process = hog("--cores", "1")
    try:
        started = process.stderr.readline()  # written once the workers are started
        assert "1 busy core(s)" in started
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0 and "Traceback" not in err, err
    assert json.loads(out.splitlines()[-1])["cores"] == 1


def test_bad_arguments_are_named():
    process = hog("--cores", "0")
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 2 and "--cores must be between 1 and" in err
    process = hog("--seconds", "-1")
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 2 and "--seconds must be 0" in err
