"""The machine's own sensors and CPU controls, through Linux sysfs and procfs (and
``vcgencmd`` on a Raspberry Pi): readers that return :mod:`omniflow.core.telemetry` values,
the sampler the power manager polls, and the cpufreq writer. No ROS imports.

Every function takes the filesystem root (``/`` on a robot; a fake tree in tests), so the
same code reads real hardware and test data. A file that is missing or unreadable reads as
unknown (NaN, empty), never as an exception.

Where readings come from (units as the kernel writes them):

- ``sys/class/thermal/thermal_zone*/{type,temp}``: millidegrees Celsius;
- ``sys/devices/system/cpu/cpu*/cpufreq/scaling_{cur,min,max}_freq``, ``cpuinfo_max_freq``
  (kHz), ``scaling_governor``, ``scaling_available_governors``;
- ``proc/stat``: CPU time per state (load is the busy share between two samples);
- ``proc/meminfo``: ``MemTotal``, ``MemAvailable`` (kB);
- ``sys/class/power_supply/*`` of ``type`` Battery: ``capacity`` (%), ``status``,
  ``power_now`` (µW) or ``current_now`` (µA) x ``voltage_now`` (µV);
- ``sys/class/hwmon/hwmon*/power*_input`` (µW), and Intel/AMD RAPL
  ``sys/class/powercap/intel-rapl:N/energy_uj`` (µJ counters: power between two samples);
- Raspberry Pi: the model from ``proc/device-tree/model``; through ``vcgencmd`` when
  installed, ``get_throttled`` and, on a Pi 5, ``pmic_read_adc``.
"""

from __future__ import annotations

import glob
import math
import os
import re
import shutil
import subprocess
from collections.abc import Callable

from omniflow.core.telemetry import (
    NAN,
    Battery,
    CpuFreq,
    CpuTimes,
    PowerModel,
    RaplSample,
    Telemetry,
    cpu_load,
    first_power,
    parse_cpu_count,
    parse_meminfo,
    parse_number,
    parse_pmic_power_w,
    parse_proc_stat,
    parse_throttled,
    rapl_power_w,
)

# Time a vcgencmd call may take before it is abandoned.
_VCGENCMD_TIMEOUT_S = 1.0

Runner = Callable[[list[str]], str | None]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _read_number(path: str, scale: float = 1.0) -> float:
    return parse_number(_read(path), scale)


def _sorted_glob(pattern: str) -> list[str]:
    def key(path: str) -> tuple:
        return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path))

    return sorted(glob.glob(pattern), key=key)


# --------------------------------------------------------------------------- readers
def thermal_zones(root: str) -> dict[str, float]:
    """Temperature of each thermal zone in °C, keyed ``zoneN:type``; unreadable zones skipped
    (a zone whose sensor is off returns an error on read)."""
    zones = {}
    for zone in _sorted_glob(os.path.join(root, "sys/class/thermal/thermal_zone*")):
        temp = _read_number(os.path.join(zone, "temp"), 0.001)
        if math.isnan(temp):
            continue
        kind = _read(os.path.join(zone, "type")) or "unknown"
        zones[f"{os.path.basename(zone).removeprefix('thermal_')}:{kind}"] = temp
    return zones


def cpu_frequencies(root: str) -> list[CpuFreq]:
    """The cpufreq policy of every CPU that exposes one."""
    result = []
    for path in _sorted_glob(os.path.join(root, "sys/devices/system/cpu/cpu[0-9]*/cpufreq")):

        def number(name: str, path: str = path) -> float:
            return _read_number(os.path.join(path, name))

        result.append(
            CpuFreq(
                cpu=os.path.basename(os.path.dirname(path)),
                cur_khz=number("scaling_cur_freq"),
                min_khz=number("scaling_min_freq"),
                max_khz=number("scaling_max_freq"),
                hardware_max_khz=number("cpuinfo_max_freq"),
                governor=_read(os.path.join(path, "scaling_governor")) or "",
                available_governors=tuple(
                    (_read(os.path.join(path, "scaling_available_governors")) or "").split()
                ),
                path=path,
            )
        )
    return result


def cpu_times(root: str) -> CpuTimes | None:
    """Aggregate CPU times from ``proc/stat`` (None when unreadable)."""
    return parse_proc_stat(_read(os.path.join(root, "proc/stat")))


def cpu_count(root: str) -> int:
    """CPUs listed in ``proc/stat`` (at least 1)."""
    return parse_cpu_count(_read(os.path.join(root, "proc/stat")))


def memory_mb(root: str) -> tuple[float, float]:
    """(total, available) memory in MB from ``proc/meminfo``; NaN when unknown."""
    return parse_meminfo(_read(os.path.join(root, "proc/meminfo")))


def batteries(root: str) -> list[Battery]:
    """Every power supply of type Battery."""
    result = []
    for path in _sorted_glob(os.path.join(root, "sys/class/power_supply/*")):
        if _read(os.path.join(path, "type")) != "Battery":
            continue
        power = _read_number(os.path.join(path, "power_now"), 1e-6)
        if math.isnan(power):
            power = _read_number(os.path.join(path, "current_now"), 1e-6) * _read_number(
                os.path.join(path, "voltage_now"), 1e-6
            )
        result.append(
            Battery(
                name=os.path.basename(path),
                percent=_read_number(os.path.join(path, "capacity")),
                status=_read(os.path.join(path, "status")) or "Unknown",
                power_w=abs(power),
            )
        )
    return result


def hwmon_power_w(root: str) -> float:
    """Sum of the hwmon power sensors (``power*_input``, µW) in W; NaN when there are none."""
    readings = [
        _read_number(path, 1e-6)
        for path in _sorted_glob(os.path.join(root, "sys/class/hwmon/hwmon*/power*_input"))
    ]
    readings = [value for value in readings if not math.isnan(value)]
    return sum(readings) if readings else NAN


def rapl_energy_uj(root: str) -> dict[str, tuple[float, float]]:
    """Top-level RAPL domains (packages): {name: (energy µJ, counter range µJ)}."""
    result = {}
    for path in _sorted_glob(os.path.join(root, "sys/class/powercap/intel-rapl:[0-9]*")):
        if ":" in os.path.basename(path).removeprefix("intel-rapl:"):
            continue  # sub-domains (core, uncore, dram) are inside their package
        energy = _read_number(os.path.join(path, "energy_uj"))
        if not math.isnan(energy):
            result[os.path.basename(path)] = (
                energy,
                _read_number(os.path.join(path, "max_energy_range_uj")),
            )
    return result


def board_model(root: str) -> str:
    """The device-tree model (e.g. 'Raspberry Pi 5 Model B Rev 1.0'), or ''."""
    for relative in ("proc/device-tree/model", "sys/firmware/devicetree/base/model"):
        text = _read(os.path.join(root, relative))
        if text:
            return text.rstrip("\x00")
    return ""


def run_vcgencmd(args: list[str]) -> str | None:
    """Run ``vcgencmd`` with a timeout; None when it is missing or fails."""
    executable = shutil.which("vcgencmd")
    if executable is None:
        return None
    try:
        done = subprocess.run(
            [executable, *args],
            capture_output=True,
            text=True,
            timeout=_VCGENCMD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


# --------------------------------------------------------------------------- sampler
class TelemetryReader:
    """Samples the machine under ``root``; keeps what rates need (CPU times, RAPL energy)
    between samples. ``now_s`` is a monotonic time in seconds, passed in by the caller.

    ``vcgencmd``: a function running ``vcgencmd`` with arguments and returning its output or
    None (default :func:`run_vcgencmd`, which returns None where it is not installed).
    """

    def __init__(
        self,
        root: str = "/",
        model: PowerModel | None = None,
        vcgencmd: Runner | None = run_vcgencmd,
    ) -> None:
        self.root = root
        self.model = model or PowerModel(idle_w=0.5, max_w=4.5)
        self._vcgencmd = vcgencmd
        self._last_times: CpuTimes | None = None
        self._last_rapl: RaplSample | None = None
        self.board = board_model(root)
        self._is_pi = "Raspberry Pi" in self.board

    def sample(self, now_s: float) -> Telemetry:
        root = self.root
        result = Telemetry(board=self.board, cpus=cpu_count(root))
        result.zones = thermal_zones(root)
        if result.zones:
            result.temperature_c = max(result.zones.values())
        times = cpu_times(root)
        result.cpu_load = cpu_load(self._last_times, times)
        self._last_times = times
        result.set_frequencies(cpu_frequencies(root))
        result.memory_total_mb, result.memory_available_mb = memory_mb(root)
        packs = batteries(root)
        if packs:
            result.battery_percent = packs[0].percent
            result.battery_status = packs[0].status
        result.power_w, result.power_source = self._power(result, packs, now_s)
        if self._is_pi and self._vcgencmd is not None:
            output = self._vcgencmd(["get_throttled"])
            if output:
                try:
                    result.throttled = parse_throttled(output)[1]
                except ValueError:
                    result.throttled = []
        return result

    def _power(self, result: Telemetry, packs: list[Battery], now_s: float) -> tuple[float, str]:
        """The first of: battery discharge power, hwmon sensors, RAPL, the Pi 5 PMIC, the
        model (the PMIC is asked only when nothing before it answered)."""
        rapl = (now_s, rapl_energy_uj(self.root))
        rapl_w = rapl_power_w(self._last_rapl, rapl)
        self._last_rapl = rapl if rapl[1] else None
        power = first_power(
            [
                (sum(p.power_w for p in packs) if packs else NAN, "battery"),
                (hwmon_power_w(self.root), "hwmon"),
                (rapl_w, "rapl"),
            ]
        )
        if power[1]:
            return power
        if self._is_pi and self._vcgencmd is not None:
            output = self._vcgencmd(["pmic_read_adc"])
            value = parse_pmic_power_w(output) if output else NAN
            if not math.isnan(value):
                return value, "pmic"
        estimate = self.model.estimate(result.cpu_load, result.freq_ratio)
        return (estimate, "estimate") if not math.isnan(estimate) else (NAN, "")


# --------------------------------------------------------------------------- CPU control
def write_cpufreq(
    root: str, name: str, value: str | Callable[[CpuFreq], str]
) -> tuple[list[str], list[str]]:
    """Write ``value`` (or ``value(cpu)``, per CPU) into ``cpufreq/<name>`` of every CPU;
    return the paths (written or already holding it, refused).

    Refused: not writable (no root, a read-only sysfs in a container)."""
    written, refused = [], []
    for cpu in cpu_frequencies(root):
        path = os.path.join(cpu.path, name)
        text = value(cpu) if callable(value) else value
        if _read(path) == text:
            written.append(path)
            continue
        try:
            with open(path, "w", encoding="ascii") as handle:
                handle.write(text)
            written.append(path)
        except OSError:
            refused.append(path)
    return written, refused
