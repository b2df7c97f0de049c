"""What ``omniflow doctor`` decides, as pure functions: each check's verdict (ok, warn, fail)
and its one-line fix from values the probes measured, the report as text or JSON, and the
exit code. The probing itself (devices, models, sysfs) is in :mod:`omniflow.doctor`.
No ROS imports, no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

OK, WARN, FAIL = "ok", "warn", "fail"
VERDICTS = (OK, WARN, FAIL)

#: PulseAudio/PipeWire keep this much audio queued or more (measured here: >= 60 ms); a direct
#: ALSA ``hw:`` device at 640-frame blocks reports well under it.
AUDIO_LATENCY_WARN_S = 0.060
#: Values of ROS_AUTOMATIC_DISCOVERY_RANGE (Jazzy).
DISCOVERY_RANGES = ("SUBNET", "LOCALHOST", "OFF", "SYSTEM_DEFAULT")
#: The RMW the graph is built and measured on (Fast DDS; its XML profiles are in config/fastdds).
DEFAULT_RMW = "rmw_fastrtps_cpp"
#: Highest ROS_DOMAIN_ID whose ports are valid on Linux (ROS 2's documented range is 0-101
#: for the default ephemeral port range, 0-232 at most).
MAX_DOMAIN_ID = 232
SAFE_DOMAIN_ID = 101


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, the verdict, what was found, and (unless
    ok) the one-line fix. ``data`` holds the measured figures (JSON report)."""

    name: str
    verdict: str
    detail: str
    fix: str = ""
    data: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}: {self.verdict!r}")


def exit_code(checks: Iterable[Check]) -> int:
    """1 when any check failed, else 0 (warnings do not fail)."""
    return 1 if any(c.verdict == FAIL for c in checks) else 0


def format_text(checks: Iterable[Check], title: str = "") -> str:
    """The report for a terminal: one line per check, its fix on the next line."""
    checks = list(checks)
    lines = [title] if title else []
    width = max((len(c.name) for c in checks), default=0)
    for c in checks:
        lines.append(f"[{c.verdict.upper():4}] {c.name:<{width}}  {c.detail}")
        if c.fix:
            lines.append(f"       {'':<{width}}  fix: {c.fix}")
    counts = {v: sum(c.verdict == v for c in checks) for v in VERDICTS}
    lines.append(f"{counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail")
    return "\n".join(lines)


def format_json(checks: Iterable[Check], profile: str) -> str:
    """The report as JSON: the profile, every check, and the exit code."""
    checks = list(checks)
    return json.dumps(
        {
            "profile": profile,
            "checks": [{**asdict(c), "data": dict(c.data)} for c in checks],
            "exit_code": exit_code(checks),
        },
        indent=2,
        default=str,
    )


# ----------------------------------------------------------------------- ROS environment
def ros_environment(env: Mapping[str, str], distro: str) -> list[Check]:
    """Distro, RMW, domain id and discovery scope from the environment. ``distro`` is what
    the installed rclpy belongs to ('' when unknown)."""
    checks = []
    named = env.get("ROS_DISTRO", "")
    if distro == "jazzy" or named == "jazzy":
        checks.append(Check("ros.distro", OK, f"ROS 2 {distro or named}"))
    elif distro or named:
        checks.append(
            Check(
                "ros.distro",
                WARN,
                f"ROS 2 {distro or named}; omniflow targets Jazzy",
                "use ROS 2 Jazzy (Ubuntu 24.04: apt install ros-jazzy-ros-base)",
            )
        )
    else:
        checks.append(
            Check(
                "ros.distro",
                FAIL,
                "no ROS 2 found (ROS_DISTRO unset and rclpy not importable)",
                "source /opt/ros/jazzy/setup.bash (robot) or run make setup (wheels)",
            )
        )
    rmw = env.get("RMW_IMPLEMENTATION", "") or DEFAULT_RMW
    if rmw == DEFAULT_RMW:
        checks.append(Check("ros.rmw", OK, f"{rmw} (Fast DDS)"))
    else:
        checks.append(
            Check(
                "ros.rmw",
                WARN,
                f"{rmw}: the graph and its DDS profiles (config/fastdds) are tested on Fast DDS",
                f"unset RMW_IMPLEMENTATION or set it to {DEFAULT_RMW}",
            )
        )
    checks.append(_domain_id(env.get("ROS_DOMAIN_ID", "")))
    checks.append(_discovery(env))
    return checks


def _domain_id(text: str) -> Check:
    if not text.strip():
        return Check(
            "ros.domain_id",
            WARN,
            "ROS_DOMAIN_ID unset: domain 0, shared with every other ROS 2 graph on the network",
            "export ROS_DOMAIN_ID=<1-101>, the same on every host of this robot",
        )
    if not text.strip().isdigit() or int(text) > MAX_DOMAIN_ID:
        return Check(
            "ros.domain_id",
            FAIL,
            f"ROS_DOMAIN_ID={text!r} is not a domain id (0-{MAX_DOMAIN_ID})",
            f"export ROS_DOMAIN_ID=<0-{SAFE_DOMAIN_ID}>",
        )
    value = int(text)
    if value > SAFE_DOMAIN_ID:
        return Check(
            "ros.domain_id",
            WARN,
            f"ROS_DOMAIN_ID={value}: above {SAFE_DOMAIN_ID} its ports can clash with "
            "the ephemeral port range",
            f"pick a domain id in 0-{SAFE_DOMAIN_ID}",
        )
    return Check("ros.domain_id", OK, f"ROS_DOMAIN_ID={value}", data={"domain_id": value})


def _discovery(env: Mapping[str, str]) -> Check:
    value = env.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "").strip().upper()
    peers = env.get("ROS_STATIC_PEERS", "").strip()
    localhost_only = env.get("ROS_LOCALHOST_ONLY", "").strip()
    data = {"range": value or "SUBNET", "static_peers": peers}
    if localhost_only == "1":
        return Check(
            "ros.discovery",
            WARN,
            "ROS_LOCALHOST_ONLY=1 is deprecated in Jazzy",
            "use ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST instead",
            data,
        )
    if value and value not in DISCOVERY_RANGES:
        return Check(
            "ros.discovery",
            FAIL,
            f"ROS_AUTOMATIC_DISCOVERY_RANGE={value!r} is not one of {', '.join(DISCOVERY_RANGES)}",
            "export ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET (robot network) or LOCALHOST",
            data,
        )
    if value == "OFF" and not peers:
        return Check(
            "ros.discovery",
            FAIL,
            "ROS_AUTOMATIC_DISCOVERY_RANGE=OFF and no ROS_STATIC_PEERS: nodes cannot find "
            "each other",
            "unset it, or list the other hosts in ROS_STATIC_PEERS",
            data,
        )
    where = {
        "LOCALHOST": "this machine only",
        "OFF": "static peers only",
    }.get(value, "the local subnet")
    extra = f", static peers {peers}" if peers else ""
    return Check("ros.discovery", OK, f"discovery on {where}{extra}", data=data)


# ----------------------------------------------------------------------- devices
def audio_latency(name: str, device: str, latency_s: float, block_s: float) -> Check:
    """A device that opened at the requested format: its latency decides the verdict."""
    data = {"device": device, "latency_ms": round(latency_s * 1e3, 1), "block_ms": block_s * 1e3}
    detail = f"{device}: opened, latency {latency_s * 1e3:.0f} ms, {block_s * 1e3:.0f} ms blocks"
    if latency_s >= AUDIO_LATENCY_WARN_S:
        return Check(
            name,
            WARN,
            detail + " (a sound server's queue)",
            "name the ALSA hw: device (e.g. device:='hw:1,0') instead of pulse/pipewire",
            data,
        )
    return Check(name, OK, detail, data=data)


def camera_frames(
    name: str,
    what: str,
    size: tuple[int, int],
    wanted: tuple[int, int],
    fps: float,
    wanted_fps: float,
) -> Check:
    """A camera that delivered frames: their size (``wanted`` 0: any) and measured rate."""
    width, height = size
    data = {"width": width, "height": height, "fps": round(fps, 1), "wanted_fps": wanted_fps}
    detail = f"{what}: {width}x{height} at {fps:.1f} fps"
    if any(w and w != s for w, s in zip(wanted, size, strict=True)):
        return Check(
            name,
            WARN,
            detail + f", not the requested {wanted[0]}x{wanted[1]} (the node resizes)",
            "set width/height to a mode the camera has (v4l2-ctl --list-formats-ext)",
            data,
        )
    if math.isfinite(fps) and fps < 0.8 * wanted_fps:
        return Check(
            name,
            WARN,
            detail + f", below the requested {wanted_fps:g} fps",
            "lower fps or the resolution; check the light (auto exposure lengthens frames)",
            data,
        )
    return Check(name, OK, detail, data=data)


def shm_segment_bytes(profile_xml: str) -> int:
    """The shared-memory segment size a Fast DDS profile (XML text) asks for; 0 when it sets
    none (Fast DDS's 512 KiB default) or is not XML."""
    import xml.etree.ElementTree as ElementTree

    try:
        root = ElementTree.fromstring(profile_xml)
    except ElementTree.ParseError:
        return 0
    # Fast DDS profiles carry an XML namespace: match the tag by its local name.
    sizes = [e.text for e in root.iter() if e.tag.endswith("segment_size")]
    return int(sizes[0]) if sizes and (sizes[0] or "").strip().isdigit() else 0


def shared_memory(free_bytes: int, segment_bytes: int, processes: int) -> Check:
    """/dev/shm must hold the large-frames profile's segment in each process that loads it
    (with room for the default segments); otherwise Fast DDS drops that transport, saying only
    "SHM Transport is not supported in the current platform", and frames go over UDP (or the
    default 512 KiB segment under ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST)."""
    need = segment_bytes * processes
    data = {"free_mb": round(free_bytes / 2**20, 1), "needed_mb": round(need / 2**20, 1)}
    detail = (
        f"/dev/shm {free_bytes / 2**20:.0f} MiB free, the frames profile needs {need >> 20} MiB"
    )
    if free_bytes < need:
        return Check(
            "dds.shm",
            FAIL,
            detail + ": camera frames fall back to UDP (~21 ms instead of ~9 ms, best-effort "
            'frames lost; Fast DDS says "SHM Transport is not supported")',
            "enlarge /dev/shm (Docker: --shm-size=256m; mount -o remount,size=256M /dev/shm)",
            data,
        )
    if free_bytes < 4 * need:
        return Check(
            "dds.shm",
            WARN,
            detail + ", little room to spare",
            "enlarge /dev/shm to 256 MiB or more",
            data,
        )
    return Check("dds.shm", OK, detail, data=data)


def thermal(zones: Mapping[str, float]) -> Check:
    """The temperature readings the power policy's thermal budget relies on."""
    if not zones:
        return Check(
            "power.thermal",
            WARN,
            "no thermal zone readable: the power policy cannot see the temperature",
            "check /sys/class/thermal/thermal_zone*/temp (containers: bind-mount /sys)",
        )
    hottest = max(zones, key=lambda k: zones[k])
    return Check(
        "power.thermal",
        OK,
        f"{len(zones)} zone(s), hottest {hottest} {zones[hottest]:.1f} °C",
        data={"zones": dict(zones)},
    )


def cpufreq(readable: list[str], writable: list[str], governor: str) -> Check:
    """cpufreq paths the power manager reads and writes (governors, max frequency)."""
    data = {"readable": readable, "writable": writable}
    if not readable:
        return Check(
            "power.cpufreq",
            WARN,
            "no cpufreq directory: the power manager cannot read or change CPU frequencies",
            "enable cpufreq in the kernel/firmware (VMs and containers often hide it)",
            data,
        )
    if len(writable) < len(readable):
        return Check(
            "power.cpufreq",
            WARN,
            f"{len(readable)} CPU(s), governor {governor or '?'}, "
            f"{len(readable) - len(writable)} not writable: modes cannot change the governor",
            "run the power manager as root, or a udev rule giving its group write access "
            "to scaling_governor and scaling_max_freq",
            data,
        )
    return Check(
        "power.cpufreq",
        OK,
        f"{len(readable)} CPU(s), governor {governor or '?'}, writable",
        data=data,
    )
