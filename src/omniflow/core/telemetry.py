"""System telemetry as plain values: what the kernel's files and ``vcgencmd`` say, parsed, and
the arithmetic that turns two samples into rates and a power figure. No ROS, no I/O: the
files are read by :mod:`omniflow.devices.sysfs`, which hands their text to the parsers here.

What a machine does not have is NaN (numbers) or empty (collections), never an exception:
containers and PCs often lack thermal zones, cpufreq, batteries or power sensors.

Units as the kernel writes them (see :mod:`omniflow.devices.sysfs` for the files):
temperatures in millidegrees Celsius, frequencies in kHz, ``proc/stat`` in jiffies,
``proc/meminfo`` in kB, battery power in µW (or current in µA x voltage in µV), hwmon power
in µW, RAPL energy counters in µJ. On a Raspberry Pi, ``vcgencmd get_throttled`` gives the
under-voltage and throttling flags and, on a Pi 5, ``vcgencmd pmic_read_adc`` the current
and voltage of each PMIC rail (their products sum to the SoC's power).

Power when no sensor exists is estimated with :class:`PowerModel`.
"""

from __future__ import annotations

import math
import re
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
# Where the power figure came from, in the order the sources are preferred.
POWER_SOURCES = ("battery", "hwmon", "rapl", "pmic", "estimate")


# --------------------------------------------------------------------------- readings
@dataclass(frozen=True)
class CpuFreq:
    """One CPU's frequency policy (kHz; NaN where not exposed)."""

    cpu: str
    cur_khz: float
    min_khz: float
    max_khz: float  # the current cap (scaling_max_freq)
    hardware_max_khz: float  # cpuinfo_max_freq
    governor: str
    available_governors: tuple[str, ...]
    path: str  # the cpufreq directory, for writes


@dataclass(frozen=True)
class Battery:
    name: str
    percent: float
    status: str  # Charging, Discharging, Full, Not charging, Unknown
    power_w: float  # NaN when the driver reports neither power nor current x voltage

    @property
    def charging(self) -> bool:
        return self.status in ("Charging", "Full")


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU time (jiffies) over all cores: busy and total."""

    busy: int
    total: int


# RAPL package energy counters at one time: (monotonic s, {domain: (energy µJ, range µJ)}).
RaplSample = tuple[float, dict[str, tuple[float, float]]]


# --------------------------------------------------------------------------- parsers
def parse_number(text: str | None, scale: float = 1.0) -> float:
    """A number from a sysfs file's text, times ``scale``; NaN when missing or not a number."""
    if text is None:
        return NAN
    try:
        return float(text) * scale
    except ValueError:
        return NAN


def parse_proc_stat(text: str | None) -> CpuTimes | None:
    """Aggregate CPU times from the first line of ``proc/stat`` (None when it is not there)."""
    if not text or not text.startswith("cpu "):
        return None
    values = [int(v) for v in text.splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest times are inside user/nice)
    values = (values + [0] * 8)[:8]
    idle = values[3] + values[4]
    total = sum(values)
    return CpuTimes(busy=total - idle, total=total)


def parse_cpu_count(text: str | None) -> int:
    """CPUs listed in ``proc/stat`` (at least 1)."""
    return max(1, sum(1 for line in (text or "").splitlines() if re.match(r"cpu\d+ ", line)))


def parse_meminfo(text: str | None) -> tuple[float, float]:
    """(total, available) memory in MB from ``proc/meminfo``; NaN when unknown."""
    values = {}
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[name] = float(parts[0]) / 1024.0
    return values.get("MemTotal", NAN), values.get("MemAvailable", NAN)


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
            (currents if match.group(2) == "A" else volts)[match.group(1)] = float(match.group(3))
    rails = currents.keys() & volts.keys()
    return sum(currents[rail] * volts[rail] for rail in rails) if rails else NAN


# --------------------------------------------------------------------------- arithmetic
def cpu_load(previous: CpuTimes | None, current: CpuTimes | None) -> float:
    """Busy share of all cores (0..1) between two samples; NaN without both."""
    if previous is None or current is None:
        return NAN
    total = current.total - previous.total
    if total <= 0:
        return NAN
    return min(max((current.busy - previous.busy) / total, 0.0), 1.0)


def rapl_power_w(previous: RaplSample | None, current: RaplSample) -> float:
    """Package power between two RAPL samples in W (a counter that wrapped is unwrapped with
    its range); NaN without a previous sample or elapsed time."""
    now_s, energies = current
    if not energies or previous is None:
        return NAN
    last_s, last = previous
    elapsed = now_s - last_s
    joules = 0.0
    for name, (energy, span) in energies.items():
        before = last.get(name, (energy, span))[0]
        delta = energy - before
        if delta < 0 and span > 0:  # the counter wrapped
            delta += span
        joules += max(delta, 0.0) * 1e-6
    return joules / elapsed if elapsed > 0 else NAN


def first_power(candidates: list[tuple[float, str]]) -> tuple[float, str]:
    """The first (power W, source) that is a positive number; (NaN, '') when none is."""
    for value, source in candidates:
        if not math.isnan(value) and value > 0:
            return value, source
    return NAN, ""


def max_freq_khz_text(cpu: CpuFreq, ratio: float) -> str:
    """What to write into ``scaling_max_freq`` to cap ``cpu`` at ``ratio`` of its hardware
    maximum (its current cap where the hardware maximum is not exposed)."""
    if math.isnan(cpu.hardware_max_khz):
        return str(int(cpu.max_khz))
    return str(int(cpu.hardware_max_khz * ratio))


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
        return self.idle_w + (self.max_w - self.idle_w) * load * ratio**2


# --------------------------------------------------------------------------- snapshot
@dataclass
class Telemetry:
    """One sample of everything known about the machine; NaN / empty where unknown."""

    temperature_c: float = NAN  # hottest thermal zone
    zones: dict[str, float] = field(default_factory=dict)
    cpu_load: float = NAN  # 0..1 over all cores since the previous sample
    cpus: int = 1
    freq_ratio: float = NAN  # mean scaling_cur_freq / cpuinfo_max_freq
    cur_freq_mhz: float = NAN  # mean over CPUs
    governor: str = ""  # of the first CPU
    memory_total_mb: float = NAN
    memory_available_mb: float = NAN
    battery_percent: float = NAN
    battery_status: str = ""
    power_w: float = NAN
    power_source: str = ""  # one of POWER_SOURCES
    board: str = ""
    throttled: list[str] = field(default_factory=list)

    @property
    def power_estimated(self) -> bool:
        return self.power_source == "estimate"

    @property
    def battery_charging(self) -> bool:
        return self.battery_status in ("Charging", "Full")

    def set_frequencies(self, freqs: list[CpuFreq]) -> None:
        """Mean frequency ratio and MHz over the CPUs, and the first CPU's governor."""
        if not freqs:
            return
        ratios = [
            f.cur_khz / f.hardware_max_khz
            for f in freqs
            if f.hardware_max_khz > 0 and not math.isnan(f.cur_khz)
        ]
        if ratios:
            self.freq_ratio = sum(ratios) / len(ratios)
        currents = [f.cur_khz for f in freqs if not math.isnan(f.cur_khz)]
        if currents:
            self.cur_freq_mhz = sum(currents) / len(currents) / 1000.0
        self.governor = freqs[0].governor

    def values(self) -> list[tuple[str, str]]:
        """Key/value pairs for diagnostics."""

        def number(value: float, digits: int = 2) -> str:
            return "nan" if math.isnan(value) else f"{value:.{digits}f}"

        pairs = [
            ("temperature_c", number(self.temperature_c, 1)),
            ("cpu_load", number(self.cpu_load, 3)),
            ("cpus", str(self.cpus)),
            ("cpu_freq_mhz", number(self.cur_freq_mhz, 0)),
            ("cpu_freq_ratio", number(self.freq_ratio, 3)),
            ("cpu_governor", self.governor),
            ("memory_total_mb", number(self.memory_total_mb, 0)),
            ("memory_available_mb", number(self.memory_available_mb, 0)),
            ("power_w", number(self.power_w, 2)),
            ("power_source", self.power_source),
            ("battery_percent", number(self.battery_percent, 0)),
            ("battery_status", self.battery_status),
            ("board", self.board),
            ("throttled", ", ".join(self.throttled)),
        ]
        pairs += [(f"temperature_c.{name}", number(value, 1)) for name, value in self.zones.items()]
        return pairs
