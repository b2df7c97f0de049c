"""Telemetry: the pure parsers and arithmetic (omniflow.core.telemetry, no files), and the
readers of omniflow.devices.sysfs on fake sysfs/procfs trees (test/data/sysfs, copied under
tmp_path where a test writes) and on this machine."""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniflow.core import telemetry
from omniflow.core.telemetry import CpuFreq, CpuTimes, PowerModel
from omniflow.devices import sysfs
from omniflow.devices.sysfs import TelemetryReader

TREES = Path(__file__).parents[1] / "data" / "sysfs"


@pytest.fixture
def tree(tmp_path):
    """A writable copy of one fake tree."""

    def copy(name: str) -> Path:
        root = tmp_path / name
        shutil.copytree(TREES / name, root)
        return root

    return copy


def set_stat(root: Path, user: int, idle: int) -> None:
    (root / "proc" / "stat").write_text(
        f"cpu  {user} 0 0 {idle} 0 0 0 0 0 0\ncpu0 {user} 0 0 {idle} 0 0 0 0 0 0\n"
    )


# ----------------------------------------------------------------- pure: text in, values out
def test_proc_stat_and_meminfo_parse_without_files():
    stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0\ncpu1 50 0 25 400 25 0 0 0\n"
    assert telemetry.parse_proc_stat(stat) == CpuTimes(busy=150, total=1000)
    assert telemetry.parse_proc_stat("") is None and telemetry.parse_proc_stat(None) is None
    assert telemetry.parse_cpu_count(stat) == 2 and telemetry.parse_cpu_count(None) == 1
    total, available = telemetry.parse_meminfo("MemTotal: 2048 kB\nMemAvailable: 1024 kB\n")
    assert (total, available) == (2.0, 1.0)
    assert all(math.isnan(v) for v in telemetry.parse_meminfo(None))
    assert telemetry.parse_number("52350", 0.001) == pytest.approx(52.35)
    assert math.isnan(telemetry.parse_number("n/a")) and math.isnan(telemetry.parse_number(None))


def test_load_and_rapl_power_between_two_samples():
    assert telemetry.cpu_load(CpuTimes(100, 1000), CpuTimes(400, 2200)) == pytest.approx(0.25)
    assert math.isnan(telemetry.cpu_load(None, CpuTimes(1, 2)))
    assert math.isnan(telemetry.cpu_load(CpuTimes(1, 2), CpuTimes(1, 2)))  # no time passed
    first = (0.0, {"intel-rapl:0": (9_000_000.0, 10_000_000.0)})
    assert math.isnan(telemetry.rapl_power_w(None, first))
    wrapped = (2.0, {"intel-rapl:0": (1_000_000.0, 10_000_000.0)})
    assert telemetry.rapl_power_w(first, wrapped) == pytest.approx(1.0)  # 2 J over 2 s
    assert telemetry.first_power([(float("nan"), "battery"), (0.0, "hwmon"), (3.0, "rapl")]) == (
        3.0,
        "rapl",
    )
    value, source = telemetry.first_power([(float("nan"), "battery")])
    assert math.isnan(value) and source == ""


def test_frequency_cap_text_falls_back_to_the_current_cap():
    cpu = CpuFreq("cpu0", 1_500_000, 600_000, 2_400_000, 2_400_000, "ondemand", (), "")
    assert telemetry.max_freq_khz_text(cpu, 0.6) == "1440000"
    assert telemetry.max_freq_khz_text(cpu, 1.0) == "2400000"
    unknown = CpuFreq("cpu0", 1_500_000, 600_000, 2_000_000, float("nan"), "", (), "")
    assert telemetry.max_freq_khz_text(unknown, 0.6) == "2000000"


# ----------------------------------------------------------------- readers on fake trees
def test_pi5_zones_frequencies_memory_and_model():
    root = str(TREES / "pi5")
    assert sysfs.thermal_zones(root) == {"zone0:cpu-thermal": pytest.approx(52.35)}
    cpus = sysfs.cpu_frequencies(root)
    assert [cpu.cpu for cpu in cpus] == ["cpu0", "cpu1", "cpu2", "cpu3"]
    assert cpus[0].cur_khz == 1_500_000 and cpus[0].hardware_max_khz == 2_400_000
    assert cpus[0].governor == "ondemand" and "powersave" in cpus[0].available_governors
    assert sysfs.cpu_count(root) == 4
    total, available = sysfs.memory_mb(root)
    assert total == pytest.approx(8060.16, abs=0.01) and available == 7168.0
    assert sysfs.board_model(root) == "Raspberry Pi 5 Model B Rev 1.0"
    assert sysfs.batteries(root) == []
    assert math.isnan(sysfs.hwmon_power_w(root))


def test_phone_battery_from_current_and_voltage_and_a_zone_without_a_sensor():
    root = str(TREES / "phone")
    zones = sysfs.thermal_zones(root)
    assert zones == {"zone0:battery": 31.0, "zone1:soc-thermal": 38.5}  # zone2 unreadable
    (battery,) = sysfs.batteries(root)  # the USB supply is not a battery
    assert battery.percent == 15 and battery.status == "Discharging"
    assert battery.power_w == pytest.approx(0.4 * 3.8)
    assert not battery.charging


def test_pc_power_sources_in_order_battery_hwmon_rapl(tree):
    root = tree("pc")
    reader = TelemetryReader(str(root), vcgencmd=None)
    first = reader.sample(0.0)
    assert first.power_source == "battery" and first.power_w == pytest.approx(12.5)
    assert first.battery_charging and first.battery_percent == 80
    assert first.temperature_c == 61.0
    (root / "sys/class/power_supply/BAT0/power_now").unlink()
    assert reader.sample(1.0).power_source == "hwmon"
    (root / "sys/class/hwmon/hwmon0/power1_input").unlink()
    # RAPL needs two samples: 6 J over 2 s of package energy is 3 W (the core sub-domain,
    # which is inside the package, is not added).
    (root / "sys/class/powercap/intel-rapl:0/energy_uj").write_text("7000000\n")
    (root / "sys/class/powercap/intel-rapl:0:0/energy_uj").write_text("900000\n")
    third = reader.sample(3.0)
    assert third.power_source == "rapl" and third.power_w == pytest.approx(3.0)


def test_rapl_counter_wrap_is_unwrapped(tree):
    root = tree("pc")
    for name in ("sys/class/power_supply/BAT0", "sys/class/hwmon"):
        shutil.rmtree(root / name)
    energy = root / "sys/class/powercap/intel-rapl:0/energy_uj"
    (root / "sys/class/powercap/intel-rapl:0/max_energy_range_uj").write_text("10000000\n")
    energy.write_text("9000000\n")
    reader = TelemetryReader(str(root), vcgencmd=None)
    reader.sample(0.0)
    energy.write_text("1000000\n")  # wrapped: 1 J to the top, 1 J after
    assert reader.sample(1.0).power_w == pytest.approx(2.0)


def test_cpu_load_between_samples_and_the_model_estimate(tree):
    root = tree("pi5")
    reader = TelemetryReader(str(root), PowerModel(idle_w=2.5, max_w=8.5), vcgencmd=None)
    first = reader.sample(0.0)
    assert math.isnan(first.cpu_load)  # no previous sample yet
    assert math.isnan(first.power_w) and first.power_source == ""
    set_stat(root, 1500 + 300, 8500 + 900)  # 300 busy of 1200 jiffies
    second = reader.sample(1.0)
    assert second.cpu_load == pytest.approx(0.25)
    assert second.freq_ratio == pytest.approx(1500 / 2400)
    assert second.cur_freq_mhz == 1500
    assert second.power_estimated
    assert second.power_w == pytest.approx(2.5 + 6.0 * 0.25 * (1500 / 2400) ** 2)
    values = dict(second.values())
    assert values["power_source"] == "estimate" and values["battery_percent"] == "nan"
    assert values["temperature_c.zone0:cpu-thermal"] == "52.4"


@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_model_is_monotonic_and_bounded_by_idle_and_max(load, other, ratio):
    model = PowerModel(idle_w=0.5, max_w=4.5)
    low, high = sorted((load, other))
    assert 0.5 <= model.estimate(low, ratio) <= model.estimate(high, ratio) <= 4.5
    assert model.estimate(high, min(ratio, 0.5)) <= model.estimate(high, ratio)
    assert math.isnan(model.estimate(float("nan")))


def test_raspberry_pi_throttling_and_pmic_through_vcgencmd(tree):
    root = tree("pi5")
    outputs = {
        "get_throttled": "throttled=0x50005\n",
        "pmic_read_adc": (
            "   3V7_WL_SW_A current(0)=0.10000000A\n"
            "     VDD_CORE_A current(7)=2.00000000A\n"
            "   3V7_WL_SW_V volt(8)=3.70000000V\n"
            "     VDD_CORE_V volt(15)=0.90000000V\n"
            "        EXT5V_V volt(24)=5.10000000V\n"
        ),
    }
    calls = []

    def vcgencmd(args):
        calls.append(args[0])
        return outputs[args[0]]

    sample = TelemetryReader(str(root), vcgencmd=vcgencmd).sample(0.0)
    assert sample.throttled == [
        "under-voltage",
        "throttled",
        "under-voltage has occurred",
        "throttling has occurred",
    ]
    assert sample.power_source == "pmic"
    assert sample.power_w == pytest.approx(0.1 * 3.7 + 2.0 * 0.9)
    assert set(calls) == {"get_throttled", "pmic_read_adc"}


def test_vcgencmd_is_not_called_off_a_pi_and_bad_output_is_ignored(tree):
    calls = []
    TelemetryReader(str(tree("phone")), vcgencmd=lambda a: calls.append(a)).sample(0.0)
    assert calls == []
    sample = TelemetryReader(str(tree("pi5")), vcgencmd=lambda a: "error=1").sample(0.0)
    assert sample.throttled == [] and sample.power_source == ""
    with pytest.raises(ValueError, match="unexpected"):
        telemetry.parse_throttled("nonsense")
    assert math.isnan(telemetry.parse_pmic_power_w("EXT5V_V volt(24)=5.1V"))


def test_cpufreq_writes_per_cpu_and_reports_what_was_refused(tree):
    root = tree("phone")
    written, refused = sysfs.write_cpufreq(str(root), "scaling_governor", "powersave")
    assert len(written) == 2 and refused == []
    assert [c.governor for c in sysfs.cpu_frequencies(str(root))] == ["powersave"] * 2
    written, _ = sysfs.write_cpufreq(
        str(root), "scaling_max_freq", lambda cpu: str(int(cpu.hardware_max_khz * 0.5))
    )
    assert {c.max_khz for c in sysfs.cpu_frequencies(str(root))} == {1_000_000}
    (root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").chmod(0o444)
    if (root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").stat().st_mode & 0o200:
        pytest.skip("cannot make a file read-only here")
    _, refused = sysfs.write_cpufreq(str(root), "scaling_governor", "performance")
    if not refused:
        pytest.skip("running as root: read-only modes do not stop writes")
    assert refused == [str(root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor")]


def test_missing_tree_reads_as_unknown(tmp_path):
    sample = TelemetryReader(str(tmp_path), vcgencmd=None).sample(0.0)
    assert math.isnan(sample.temperature_c) and math.isnan(sample.cpu_load)
    assert math.isnan(sample.memory_total_mb) and math.isnan(sample.battery_percent)
    assert math.isnan(sample.power_w) and sample.zones == {} and sample.cpus == 1


def test_this_machine_reads_sensibly():
    reader = TelemetryReader("/")
    reader.sample(0.0)
    time.sleep(0.3)  # some jiffies must pass for a load
    sample = reader.sample(0.3)
    assert 0.0 <= sample.cpu_load <= 1.0
    assert sample.memory_total_mb > sample.memory_available_mb > 0
    assert sample.cpus >= 1
    assert math.isnan(sample.temperature_c) or -40 < sample.temperature_c < 130
    assert sample.power_source in ("battery", "hwmon", "rapl", "pmic", "estimate")
    assert sample.power_w > 0
