"""System telemetry from Linux sysfs and procfs: temperature, CPU frequency and load, memory,
battery, power sensors, and Raspberry Pi specifics. No ROS imports.

Every reader takes the filesystem root (``/`` on a robot; a fake tree in tests), so the same
code reads real hardware and test data. What a machine does not have is NaN (numbers) or
empty (collections), never an exception: containers and PCs often lack thermal zones,
cpufreq, batteries or power sensors.

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
  installed, ``get_throttled`` (under-voltage and throttling flags) and, on a Pi 5,
  ``pmic_read_adc`` (current and voltage of each PMIC rail: their products sum to the SoC's
  power).

Power when no sensor exists is estimated with :class:`PowerModel`.
"""

from __future__ import annotations

import glob
import math
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

NAN = float("nan")

# vcgencmd get_throttled bits (Raspberry Pi firmware documentation).
THROTTLED_FLAGS = {
    0: "under-voltage",
    1: "arm frequency capped",
    2: "throttled",
    3: "soft temperature limit",
    16: "under-voltage has occurred",
    17: "arm frequency capping has occurred",
    18: "throttling has occurred",
    19: "soft temperature limit has occurred",
}
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
    text = _read(path)
    if text is None:
        return NAN
    try:
        return float(text) * scale
    except ValueError:
        return NAN


def _sorted_glob(pattern: str) -> list[str]:
    def key(path: str) -> tuple:
        return tuple(int(part) if part.isdigit() else part
                     for part in re.split(r"(\d+)", path))
    return sorted(glob.glob(pattern), key=key)


# --------------------------------------------------------------------------- plain readers
@dataclass(frozen=True)
class CpuFreq:
    """One CPU's frequency policy (kHz; NaN where not exposed)."""

    cpu: str
    cur_khz: float
    min_khz: float
    max_khz: float           # the current cap (scaling_max_freq)
    hardware_max_khz: float  # cpuinfo_max_freq
    governor: str
    available_governors: tuple[str, ...]
    path: str                # the cpufreq directory, for writes


@dataclass(frozen=True)
class Battery:
    name: str
    percent: float
    status: str       # Charging, Discharging, Full, Not charging, Unknown
    power_w: float    # NaN when the driver reports neither power nor current x voltage

    @property
    def charging(self) -> bool:
        return self.status in ("Charging", "Full")


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU time (jiffies) over all cores: busy and total."""

    busy: int
    total: int


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
        result.append(CpuFreq(
            cpu=os.path.basename(os.path.dirname(path)),
            cur_khz=number("scaling_cur_freq"), min_khz=number("scaling_min_freq"),
            max_khz=number("scaling_max_freq"), hardware_max_khz=number("cpuinfo_max_freq"),
            governor=_read(os.path.join(path, "scaling_governor")) or "",
            available_governors=tuple(
                (_read(os.path.join(path, "scaling_available_governors")) or "").split()),
            path=path))
    return result


def cpu_times(root: str) -> CpuTimes | None:
    """Aggregate CPU times from ``proc/stat`` (None when unreadable)."""
    text = _read(os.path.join(root, "proc/stat"))
    if not text or not text.startswith("cpu "):
        return None
    values = [int(v) for v in text.splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest times are inside user/nice)
    values = (values + [0] * 8)[:8]
    idle = values[3] + values[4]
    total = sum(values)
    return CpuTimes(busy=total - idle, total=total)


def cpu_count(root: str) -> int:
    """CPUs listed in ``proc/stat`` (at least 1)."""
    text = _read(os.path.join(root, "proc/stat")) or ""
    return max(1, sum(1 for line in text.splitlines() if re.match(r"cpu\d+ ", line)))


def memory_mb(root: str) -> tuple[float, float]:
    """(total, available) memory in MB from ``proc/meminfo``; NaN when unknown."""
    values = {}
    for line in (_read(os.path.join(root, "proc/meminfo")) or "").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[name] = float(parts[0]) / 1024.0
    return values.get("MemTotal", NAN), values.get("MemAvailable", NAN)


def batteries(root: str) -> list[Battery]:
    """Every power supply of type Battery."""
    result = []
    for path in _sorted_glob(os.path.join(root, "sys/class/power_supply/*")):
        if _read(os.path.join(path, "type")) != "Battery":
            continue
        power = _read_number(os.path.join(path, "power_now"), 1e-6)
        if math.isnan(power):
            power = (_read_number(os.path.join(path, "current_now"), 1e-6)
                     * _read_number(os.path.join(path, "voltage_now"), 1e-6))
        result.append(Battery(
            name=os.path.basename(path),
            percent=_read_number(os.path.join(path, "capacity")),
            status=_read(os.path.join(path, "status")) or "Unknown",
            power_w=abs(power)))
    return result


def hwmon_power_w(root: str) -> float:
    """Sum of the hwmon power sensors (``power*_input``, µW) in W; NaN when there are none."""
    readings = [_read_number(path, 1e-6) for path in _sorted_glob(
        os.path.join(root, "sys/class/hwmon/hwmon*/power*_input"))]
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
                energy, _read_number(os.path.join(path, "max_energy_range_uj")))
    return result


def board_model(root: str) -> str:
    """The device-tree model (e.g. 'Raspberry Pi 5 Model B Rev 1.0'), or ''."""
    for relative in ("proc/device-tree/model", "sys/firmware/devicetree/base/model"):
        text = _read(os.path.join(root, relative))
        if text:
            return text.rstrip("\x00")
    return ""


# --------------------------------------------------------------------------- Raspberry Pi
def parse_throttled(text: str) -> tuple[int, list[str]]:
    """``vcgencmd get_throttled`` output ('throttled=0x50005') -> (bits, flag names)."""
    match = re.search(r"throttled=(0x[0-9a-fA-F]+|\d+)", text)
    if not match:
        raise ValueError(f"unexpected get_throttled output: {text!r}")
    bits = int(match.group(1), 0)
    return bits, [name for bit, name in THROTTLED_FLAGS.items() if bits >> bit & 1]


def parse_pmic_power_w(text: str) -> float:
    """Sum of current x voltage over the rails of ``vcgencmd pmic_read_adc`` (Pi 5), in W;
    NaN when no rail has both. Lines look like ``VDD_CORE_A current(7)=2.4A`` and
    ``VDD_CORE_V volt(15)=0.88V``: rail name, then _A or _V."""
    currents, volts = {}, {}
    for line in text.splitlines():
        match = re.match(r"\s*(\S+)_([AV])\s+\w+\(\d+\)=([0-9.eE+-]+)[AV]", line)
        if match:
            (currents if match.group(2) == "A" else volts)[match.group(1)] = float(
                match.group(3))
    rails = currents.keys() & volts.keys()
    return sum(currents[rail] * volts[rail] for rail in rails) if rails else NAN


def run_vcgencmd(args: list[str]) -> str | None:
    """Run ``vcgencmd`` with a timeout; None when it is missing or fails."""
    executable = shutil.which("vcgencmd")
    if executable is None:
        return None
    try:
        done = subprocess.run([executable, *args], capture_output=True, text=True,
                              timeout=_VCGENCMD_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


# --------------------------------------------------------------------------- power model
@dataclass(frozen=True)
class PowerModel:
    """Power estimate when no sensor exists, per board.

    P = idle_w + (max_w - idle_w) * load * (f / f_max) ** 2

    ``load`` is the busy share of all cores (0..1) and ``f / f_max`` the mean current frequency
    over the hardware maximum (1 when cpufreq is not exposed). Dynamic power is C·V²·f; on DVFS
    tables V falls roughly with f, and at a lower f the same work keeps the cores busy longer
    (load rises), so what is left per unit of load is about (f / f_max)². ``idle_w`` is the
    board at rest, ``max_w`` with every core busy at the highest frequency (measured once per
    board with a meter; the profiles carry them).
    """

    idle_w: float
    max_w: float

    def estimate(self, load: float, freq_ratio: float = 1.0) -> float:
        if math.isnan(load):
            return NAN
        ratio = 1.0 if math.isnan(freq_ratio) else min(max(freq_ratio, 0.0), 1.0)
        load = min(max(load, 0.0), 1.0)
        return self.idle_w + (self.max_w - self.idle_w) * load * ratio ** 2


# --------------------------------------------------------------------------- snapshot
@dataclass
class Telemetry:
    """One sample of everything known about the machine; NaN / empty where unknown."""

    temperature_c: float = NAN          # hottest thermal zone
    zones: dict[str, float] = field(default_factory=dict)
    cpu_load: float = NAN               # 0..1 over all cores since the previous sample
    cpus: int = 1
    freq_ratio: float = NAN             # mean scaling_cur_freq / cpuinfo_max_freq
    cur_freq_mhz: float = NAN           # mean over CPUs
    governor: str = ""                  # of the first CPU
    memory_total_mb: float = NAN
    memory_available_mb: float = NAN
    battery_percent: float = NAN
    battery_status: str = ""
    power_w: float = NAN
    power_source: str = ""              # battery, hwmon, rapl, pmic, estimate
    board: str = ""
    throttled: list[str] = field(default_factory=list)

    @property
    def power_estimated(self) -> bool:
        return self.power_source == "estimate"

    @property
    def battery_charging(self) -> bool:
        return self.battery_status in ("Charging", "Full")

    def values(self) -> list[tuple[str, str]]:
        """Key/value pairs for diagnostics."""
        def number(value: float, digits: int = 2) -> str:
            return "nan" if math.isnan(value) else f"{value:.{digits}f}"
        pairs = [("temperature_c", number(self.temperature_c, 1)),
                 ("cpu_load", number(self.cpu_load, 3)), ("cpus", str(self.cpus)),
                 ("cpu_freq_mhz", number(self.cur_freq_mhz, 0)),
                 ("cpu_freq_ratio", number(self.freq_ratio, 3)),
                 ("cpu_governor", self.governor),
                 ("memory_total_mb", number(self.memory_total_mb, 0)),
                 ("memory_available_mb", number(self.memory_available_mb, 0)),
                 ("power_w", number(self.power_w, 2)), ("power_source", self.power_source),
                 ("battery_percent", number(self.battery_percent, 0)),
                 ("battery_status", self.battery_status), ("board", self.board),
                 ("throttled", ", ".join(self.throttled))]
        pairs += [(f"temperature_c.{name}", number(value, 1))
                  for name, value in self.zones.items()]
        return pairs


class TelemetryReader:
    """Samples the machine under ``root``; keeps what rates need (CPU times, RAPL energy)
    between samples. ``now_s`` is a monotonic time in seconds, passed in by the caller.

    ``vcgencmd``: a function running ``vcgencmd`` with arguments and returning its output or
    None (default :func:`run_vcgencmd`, which returns None where it is not installed).
    """

    def __init__(self, root: str = "/", model: PowerModel | None = None,
                 vcgencmd: Runner | None = run_vcgencmd) -> None:
        self.root = root
        self.model = model or PowerModel(idle_w=0.5, max_w=4.5)
        self._vcgencmd = vcgencmd
        self._last_times: CpuTimes | None = None
        self._last_rapl: tuple[float, dict[str, tuple[float, float]]] | None = None
        self.board = board_model(root)
        self._is_pi = "Raspberry Pi" in self.board

    def sample(self, now_s: float) -> Telemetry:
        root = self.root
        result = Telemetry(board=self.board, cpus=cpu_count(root))
        result.zones = thermal_zones(root)
        if result.zones:
            result.temperature_c = max(result.zones.values())
        times = cpu_times(root)
        if times is not None and self._last_times is not None:
            total = times.total - self._last_times.total
            if total > 0:
                result.cpu_load = min(max((times.busy - self._last_times.busy) / total, 0.0),
                                      1.0)
        self._last_times = times
        freqs = cpu_frequencies(root)
        if freqs:
            ratios = [f.cur_khz / f.hardware_max_khz for f in freqs
                      if f.hardware_max_khz > 0 and not math.isnan(f.cur_khz)]
            if ratios:
                result.freq_ratio = sum(ratios) / len(ratios)
            currents = [f.cur_khz for f in freqs if not math.isnan(f.cur_khz)]
            if currents:
                result.cur_freq_mhz = sum(currents) / len(currents) / 1000.0
            result.governor = freqs[0].governor
        result.memory_total_mb, result.memory_available_mb = memory_mb(root)
        packs = batteries(root)
        if packs:
            result.battery_percent = packs[0].percent
            result.battery_status = packs[0].status
        self._read_power(result, packs, now_s)
        if self._is_pi and self._vcgencmd is not None:
            output = self._vcgencmd(["get_throttled"])
            if output:
                try:
                    result.throttled = parse_throttled(output)[1]
                except ValueError:
                    result.throttled = []
        return result

    def _read_power(self, result: Telemetry, packs: list[Battery], now_s: float) -> None:
        """The first of: battery discharge power, hwmon sensors, RAPL, the Pi 5 PMIC, the
        model."""
        rapl = rapl_energy_uj(self.root)
        rapl_w = NAN
        if rapl and self._last_rapl is not None:
            last_s, last = self._last_rapl
            elapsed = now_s - last_s
            joules = 0.0
            for name, (energy, span) in rapl.items():
                before = last.get(name, (energy, span))[0]
                delta = energy - before
                if delta < 0 and span > 0:  # the counter wrapped
                    delta += span
                joules += max(delta, 0.0) * 1e-6
            if elapsed > 0:
                rapl_w = joules / elapsed
        self._last_rapl = (now_s, rapl) if rapl else None
        candidates = [(sum(p.power_w for p in packs) if packs else NAN, "battery"),
                      (hwmon_power_w(self.root), "hwmon"), (rapl_w, "rapl")]
        for value, source in candidates:
            if not math.isnan(value) and value > 0:
                result.power_w, result.power_source = value, source
                return
        if self._is_pi and self._vcgencmd is not None:
            output = self._vcgencmd(["pmic_read_adc"])
            value = parse_pmic_power_w(output) if output else NAN
            if not math.isnan(value):
                result.power_w, result.power_source = value, "pmic"
                return
        estimate = self.model.estimate(result.cpu_load, result.freq_ratio)
        if not math.isnan(estimate):
            result.power_w, result.power_source = estimate, "estimate"


# --------------------------------------------------------------------------- CPU control
def write_cpufreq(root: str, name: str,
                  value: str | Callable[[CpuFreq], str]) -> tuple[list[str], list[str]]:
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
