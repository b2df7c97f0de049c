#!/usr/bin/env python3
"""Cross-process transport latency of omniflow's two streams, per Fast DDS configuration.

What is measured, per *variant* (a set of environment variables, in place in every process
before its ROS context exists), with one QoS for both streams (``--qos``):

* one-way latency of an ``omniflow/msg/AudioChunk`` carrying 640 int16 samples (1280 bytes,
  40 ms at 16 kHz), published every 40 ms;
* one-way latency of a 1920x1080 ``rgb8`` ``sensor_msgs/Image`` (6,220,800 bytes), published at
  ``--frame-rate``;
* how long ``publisher.publish(frame)`` blocks the caller, and how long filling ``msg.data``
  takes (``array.array('B')`` + ``frombytes(ndarray)``; see below).

Method. The driver (this script without ``--role``) never imports rclpy. For every trial it
starts ``--subs`` subscriber processes and one publisher process (``--role sub`` / ``--role
pub``), each with a clean environment: the Fast DDS / rmw variables below are removed, then the
variant's are set, with ``RMW_IMPLEMENTATION=rmw_fastrtps_cpp`` and a ``ROS_DOMAIN_ID`` of the
run's own so that other ROS processes on the host do not join. The publisher waits (with a
timeout) until ``get_subscription_count()`` reaches ``--subs`` on both topics, sends a few
warm-up messages that are not counted, then the audio phase, then the frame phase (the phases
do not overlap, so each stream is measured alone). Just before
each ``publish()`` it writes ``time.time_ns()`` into ``header.stamp``; the subscriber reads
``time.time_ns()`` first thing in its callback, so the latency includes serialisation, the
transport, and rclpy's conversion of the received message into Python. Both processes run on
one host, so CLOCK_REALTIME is a shared clock; this is a benchmark convenience only (nodes stamp
from their ROS clock). Subscribers exit when they have every message or when the publisher has
gone; the publisher lingers (bounded) until its subscribers have gone.

Variants are interleaved: each of ``--rounds`` rounds runs every variant once, in an order
rotated per round, so slow spells on a shared machine spread over all variants. Samples are
pooled per variant over rounds; the output gives median, p90 and n, lost messages, and the
ratio of each variant's medians to the ``default`` variant measured in the same run.

``msg.data`` is assigned an ``array.array('B')`` filled with ``frombytes(ndarray)``: the
generated setter takes an ``array.array`` of the right type code as is, while anything else is
copied element by element through ``array.array('B', value)`` (~0.3 s for a numpy frame) and,
with ``ROS_PYTHON_CHECK_FIELDS=1``, validated element by element (~0.3 s for ``bytes``).

Usage (``--list`` names the variants; shipped profiles are ``config/fastdds/*.xml`` by stem)::

    .venv/bin/python benchmarks/transport.py --all --rounds 3 --json /tmp/transport.json
    .venv/bin/python benchmarks/transport.py --profile large_frames --qos sensor_data
    .venv/bin/python benchmarks/transport.py --profile large_frames --subs 2 --sub-profile default

Lost messages are counted per subscriber. ``--sub-profile`` gives every subscriber another
variant's settings (does a default-configured node still hear a publisher using a profile?);
``--env KEY=VALUE`` adds a variable to every child (e.g. ``ROS_AUTOMATIC_DISCOVERY_RANGE``).
A benchmark prints figures; it does not pass or fail on a slow machine (exit 1 only when no
variant delivered a single frame).
"""

from __future__ import annotations

import argparse
import array
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import ratio, summary, write_result

REPO_ROOT = Path(__file__).resolve().parents[1]
PROFILE_DIR = REPO_ROOT / "config" / "fastdds"

AUDIO_TOPIC = "bench/audio"
FRAME_TOPIC = "bench/image"
AUDIO_SAMPLES = 640  # int16 samples per chunk: 40 ms at 16 kHz
AUDIO_PERIOD_S = 0.040
FRAME_WIDTH, FRAME_HEIGHT = 1920, 1080
AUDIO_WARMUP = 5
FRAME_WARMUP = 3

# Variables that change the transport; removed from every child before a variant's are set.
TRANSPORT_ENV = (
    "FASTDDS_BUILTIN_TRANSPORTS",
    "FASTRTPS_DEFAULT_PROFILES_FILE",
    "FASTDDS_DEFAULT_PROFILES_FILE",
    "RMW_FASTRTPS_USE_QOS_FROM_XML",
    "RMW_FASTRTPS_PUBLICATION_MODE",
    "ROS_AUTOMATIC_DISCOVERY_RANGE",
    "ROS_STATIC_PEERS",
    "ROS_LOCALHOST_ONLY",
    "ROS_PYTHON_CHECK_FIELDS",
    "SKIP_DEFAULT_XML_FILE",
)


class BenchmarkError(RuntimeError):
    """A trial could not run: discovery timed out, a child failed, or output was unreadable."""


@dataclass(frozen=True)
class Variant:
    """One configuration under test: the environment of its processes."""

    name: str
    description: str
    env: dict[str, str] = field(default_factory=dict)


BUILTIN_VARIANTS: tuple[Variant, ...] = (
    Variant("default", "Jazzy defaults: UDPv4 + SHM built-in transports"),
    Variant(
        "async",
        "RMW_FASTRTPS_PUBLICATION_MODE=ASYNCHRONOUS",
        {"RMW_FASTRTPS_PUBLICATION_MODE": "ASYNCHRONOUS"},
    ),
    Variant(
        "sync",
        "RMW_FASTRTPS_PUBLICATION_MODE=SYNCHRONOUS",
        {"RMW_FASTRTPS_PUBLICATION_MODE": "SYNCHRONOUS"},
    ),
    Variant(
        "env_shm",
        "FASTDDS_BUILTIN_TRANSPORTS=SHM (no UDP at all)",
        {"FASTDDS_BUILTIN_TRANSPORTS": "SHM"},
    ),
    Variant(
        "env_large_data",
        "FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA (SHM + TCP, UDP discovery)",
        {"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"},
    ),
    Variant(
        "env_large_data_16m",
        "LARGE_DATA with max_msg_size=1MB, sockets_size=16MB (its SHM segment is twice that)",
        {"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA?max_msg_size=1MB&sockets_size=16MB"},
    ),
    Variant(
        "env_udp",
        "FASTDDS_BUILTIN_TRANSPORTS=UDPv4 (no SHM: stands in for another host)",
        {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"},
    ),
)


def profile_variant(path: Path) -> Variant:
    """A variant that loads the Fast DDS XML profile file ``path``, named by its stem."""
    path = path.resolve()
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    return Variant(
        path.stem,
        f"FASTRTPS_DEFAULT_PROFILES_FILE={shown}",
        {"FASTRTPS_DEFAULT_PROFILES_FILE": str(path)},
    )


def shipped_variants(profile_dir: Path = PROFILE_DIR) -> list[Variant]:
    """One variant per shipped Fast DDS XML profile (``config/fastdds/*.xml``)."""
    return [profile_variant(path) for path in sorted(profile_dir.glob("*.xml"))]


def all_variants() -> dict[str, Variant]:
    """Built-in research variants and shipped profiles, by name."""
    variants = {v.name: v for v in BUILTIN_VARIANTS}
    for v in shipped_variants():
        variants[v.name] = v
    return variants


# --------------------------------------------------------------------------------------------
# Child processes (import rclpy lazily: the environment must be in place first).


def _qos(kind: str) -> Any:
    from rclpy.qos import QoSProfile, qos_profile_sensor_data

    return qos_profile_sensor_data if kind == "sensor_data" else QoSProfile(depth=10)


def _stamp_now(header: Any) -> None:
    now = time.time_ns()
    header.stamp.sec, header.stamp.nanosec = divmod(now, 1_000_000_000)


def _fill_uint8(buffer: Any) -> array.array:
    """Copy a C-contiguous uint8 buffer (bytes, ndarray) into an ``array.array('B')``."""
    data = array.array("B")
    data.frombytes(buffer)
    return data


def _wait_until(predicate: Any, timeout_s: float, spin: Any, what: str) -> None:
    """Spin until ``predicate()`` holds; raise BenchmarkError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        spin(0.02)


def run_publisher(args: argparse.Namespace) -> dict[str, Any]:
    """Publish the audio then the frame phase; return publish() and fill timings (ms)."""
    import numpy as np
    import rclpy
    from sensor_msgs.msg import Image

    from omniflow.msg import AudioChunk

    rclpy.init()
    node = rclpy.create_node("transport_bench_pub")
    try:
        qos = _qos(args.qos)
        audio_pub = node.create_publisher(AudioChunk, AUDIO_TOPIC, qos)
        frame_pub = node.create_publisher(Image, FRAME_TOPIC, qos)

        def spin(timeout_s: float) -> None:
            rclpy.spin_once(node, timeout_sec=timeout_s)

        _wait_until(
            lambda: (
                min(audio_pub.get_subscription_count(), frame_pub.get_subscription_count())
                >= args.subs
            ),
            args.discovery_timeout,
            spin,
            f"{args.subs} subscriber(s) to match",
        )

        rng = np.random.default_rng(0)
        audio = rng.integers(-3000, 3000, AUDIO_SAMPLES, dtype=np.int16).astype("<i2")
        audio_bytes = audio.view(np.uint8)  # S16LE as a flat byte buffer
        frames = [
            rng.integers(0, 256, (FRAME_HEIGHT, FRAME_WIDTH, 3), dtype=np.uint8) for _ in range(2)
        ]
        audio_pub_ms: list[float] = []
        frame_pub_ms: list[float] = []
        fill_ms: list[float] = []

        next_t = time.monotonic()
        for seq in range(AUDIO_WARMUP + args.chunks):
            msg = AudioChunk()
            msg.header.frame_id = "bench_mic"
            msg.sample_rate = 16000
            msg.channels = 1
            msg.format = AudioChunk.FORMAT_S16LE
            msg.sequence = seq
            msg.data = _fill_uint8(audio_bytes)
            _stamp_now(msg.header)
            t0 = time.perf_counter()
            audio_pub.publish(msg)
            audio_pub_ms.append((time.perf_counter() - t0) * 1e3)
            next_t += AUDIO_PERIOD_S
            time.sleep(max(0.0, next_t - time.monotonic()))

        time.sleep(0.3)
        period = 1.0 / args.frame_rate
        next_t = time.monotonic()
        for seq in range(FRAME_WARMUP + args.frames):
            t0 = time.perf_counter()
            msg = Image()
            msg.header.frame_id = f"seq={seq}"  # the benchmark's sequence number, not a frame
            msg.height, msg.width = FRAME_HEIGHT, FRAME_WIDTH
            msg.encoding = "rgb8"
            msg.step = FRAME_WIDTH * 3
            msg.data = _fill_uint8(frames[seq % len(frames)])
            fill_ms.append((time.perf_counter() - t0) * 1e3)
            _stamp_now(msg.header)
            t0 = time.perf_counter()
            frame_pub.publish(msg)
            frame_pub_ms.append((time.perf_counter() - t0) * 1e3)
            next_t += period
            time.sleep(max(0.0, next_t - time.monotonic()))

        # Keep the writers alive (reliable repairs) until the subscribers leave, bounded.
        deadline = time.monotonic() + args.linger
        while time.monotonic() < deadline and (
            audio_pub.get_subscription_count() or frame_pub.get_subscription_count()
        ):
            spin(0.05)
        return {
            "audio_publish_ms": audio_pub_ms[AUDIO_WARMUP:],
            "frame_publish_ms": frame_pub_ms[FRAME_WARMUP:],
            "frame_fill_ms": fill_ms[FRAME_WARMUP:],
        }
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def run_subscriber(args: argparse.Namespace) -> dict[str, Any]:
    """Receive both streams; return per-message one-way latencies (ms) by sequence number."""
    import rclpy
    from sensor_msgs.msg import Image

    from omniflow.msg import AudioChunk

    audio_lat: dict[int, float] = {}
    frame_lat: dict[int, float] = {}

    def on_audio(msg: Any) -> None:
        recv = time.time_ns()
        sent = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        audio_lat[msg.sequence] = (recv - sent) / 1e6

    def on_frame(msg: Any) -> None:
        recv = time.time_ns()
        sent = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        frame_lat[int(msg.header.frame_id.removeprefix("seq="))] = (recv - sent) / 1e6

    rclpy.init()
    node = rclpy.create_node("transport_bench_sub")
    try:
        qos = _qos(args.qos)
        audio_sub = node.create_subscription(AudioChunk, AUDIO_TOPIC, on_audio, qos)
        node.create_subscription(Image, FRAME_TOPIC, on_frame, qos)
        expected_audio = AUDIO_WARMUP + args.chunks
        expected_frames = FRAME_WARMUP + args.frames
        seen_publisher = False
        deadline = time.monotonic() + args.discovery_timeout + trial_duration_s(args)
        while time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
            if len(audio_lat) >= expected_audio and len(frame_lat) >= expected_frames:
                break
            publishers = audio_sub.get_publisher_count()
            seen_publisher = seen_publisher or publishers > 0
            if seen_publisher and publishers == 0:
                break  # the publisher is done and gone: whatever is missing was lost
        return {
            "audio_ms": {str(k): v for k, v in sorted(audio_lat.items()) if k >= AUDIO_WARMUP},
            "frame_ms": {str(k): v for k, v in sorted(frame_lat.items()) if k >= FRAME_WARMUP},
        }
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def trial_duration_s(args: argparse.Namespace) -> float:
    """Upper bound of the sending time of one trial, warm-up included."""
    return (
        (AUDIO_WARMUP + args.chunks) * AUDIO_PERIOD_S
        + (FRAME_WARMUP + args.frames) / args.frame_rate
        + 0.3
    )


# --------------------------------------------------------------------------------------------
# Driver.


def child_env(variant: Variant, domain_id: int, extra: dict[str, str]) -> dict[str, str]:
    """The process environment minus transport settings, plus the variant's and ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in TRANSPORT_ENV}
    env.update(variant.env)
    env.update(extra)
    env["RMW_IMPLEMENTATION"] = "rmw_fastrtps_cpp"
    env["ROS_DOMAIN_ID"] = str(domain_id)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _child_cmd(role: str, args: argparse.Namespace) -> list[str]:
    options = {
        "--frames": args.frames,
        "--chunks": args.chunks,
        "--frame-rate": args.frame_rate,
        "--subs": args.subs,
        "--qos": args.qos,
        "--discovery-timeout": args.discovery_timeout,
        "--linger": args.linger,
    }
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", role]
    for flag, value in options.items():
        cmd += [flag, str(value)]
    return cmd


def _stop(proc: subprocess.Popen[str]) -> None:
    """Interrupt a child (rclpy then shuts down cleanly and removes its /dev/shm segment)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=10)


def _parse_child(name: str, proc: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        _stop(proc)
        raise BenchmarkError(f"{name} did not finish within {timeout_s:.0f} s") from exc
    if proc.returncode != 0:
        raise BenchmarkError(f"{name} exited with {proc.returncode}: {err.strip()[-800:]}")
    try:
        result = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise BenchmarkError(f"{name} printed no JSON result: {err.strip()[-800:]}") from exc
    # Fast DDS reports bad XML, failed transports, etc. on stderr and carries on: keep them.
    result["warnings"] = [
        line
        for line in err.splitlines()
        if any(tag in line for tag in ("Error", "Warning", "WARN", "ERROR"))
    ]
    return result


def run_trial(
    pub_variant: Variant, sub_variant: Variant, args: argparse.Namespace, domain_id: int
) -> dict[str, Any]:
    """One publisher process and ``args.subs`` subscriber processes; raw samples back."""
    timeout_s = args.discovery_timeout + trial_duration_s(args) + args.linger + 30.0
    subs = [
        subprocess.Popen(
            _child_cmd("sub", args),
            env=child_env(sub_variant, domain_id, args.env),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(args.subs)
    ]
    pub = subprocess.Popen(
        _child_cmd("pub", args),
        env=child_env(pub_variant, domain_id, args.env),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        pub_result = _parse_child("publisher", pub, timeout_s)
        sub_results = [_parse_child(f"subscriber {i}", s, 30.0) for i, s in enumerate(subs)]
    finally:
        for proc in [pub, *subs]:
            _stop(proc)
    return {"pub": pub_result, "subs": sub_results}


def summarize(samples: list[float]) -> dict[str, float | int | None]:
    """Median, p90 and count, in ms."""
    return summary(samples, 3, suffix="_ms")


def run_benchmark(
    variants: list[Variant], sub_override: Variant | None, args: argparse.Namespace
) -> dict[str, Any]:
    """Interleave trials over rounds and pool the samples per variant."""
    domain_id = args.domain_id if args.domain_id is not None else random.randint(1, 100)
    load_before = round(os.getloadavg()[0], 2)
    pooled: dict[str, dict[str, list[float]]] = {
        v.name: {"audio": [], "frame": [], "publish": [], "audio_publish": [], "fill": []}
        for v in variants
    }
    lost: dict[str, dict[str, int]] = {v.name: {"audio": 0, "frame": 0} for v in variants}
    errors: dict[str, list[str]] = {v.name: [] for v in variants}
    warnings: dict[str, set[str]] = {v.name: set() for v in variants}
    for rnd in range(args.rounds):
        shift = rnd % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            sub_variant = sub_override or variant
            print(
                f"round {rnd + 1}/{args.rounds}: {variant.name} (subscribers: {sub_variant.name})",
                file=sys.stderr,
                flush=True,
            )
            try:
                result = run_trial(variant, sub_variant, args, domain_id)
            except BenchmarkError as err:
                errors[variant.name].append(str(err))
                print(f"  failed: {err}", file=sys.stderr, flush=True)
                continue
            for child in [result["pub"], *result["subs"]]:
                warnings[variant.name].update(child["warnings"][:20])
            acc = pooled[variant.name]
            acc["publish"] += result["pub"]["frame_publish_ms"]
            acc["audio_publish"] += result["pub"]["audio_publish_ms"]
            acc["fill"] += result["pub"]["frame_fill_ms"]
            for sub in result["subs"]:
                acc["audio"] += sub["audio_ms"].values()
                acc["frame"] += sub["frame_ms"].values()
                lost[variant.name]["audio"] += args.chunks - len(sub["audio_ms"])
                lost[variant.name]["frame"] += args.frames - len(sub["frame_ms"])
            print(
                f"  frame median {summarize(acc['frame'])['median_ms']} ms,"
                f" audio median {summarize(acc['audio'])['median_ms']} ms (pooled so far)",
                file=sys.stderr,
                flush=True,
            )

    report: dict[str, Any] = {
        "config": {
            "frames_per_trial": args.frames,
            "chunks_per_trial": args.chunks,
            "rounds": args.rounds,
            "frame_rate_hz": args.frame_rate,
            "qos": args.qos,
            "audio_period_ms": AUDIO_PERIOD_S * 1e3,
            "subscribers": args.subs,
            "subscriber_variant": sub_override.name if sub_override else "same as publisher",
            "extra_env": args.env,
            "frame_bytes": FRAME_WIDTH * FRAME_HEIGHT * 3,
            "audio_bytes": AUDIO_SAMPLES * 2,
            "python": sys.executable,
            "cpus": os.cpu_count(),
            "load_average_1min": [load_before, round(os.getloadavg()[0], 2)],
        },
        "variants": {},
    }
    for v in variants:
        acc = pooled[v.name]
        report["variants"][v.name] = {
            "description": v.description,
            "env": v.env,
            "audio_latency": summarize(acc["audio"]) | {"lost": lost[v.name]["audio"]},
            "frame_latency": summarize(acc["frame"]) | {"lost": lost[v.name]["frame"]},
            "frame_publish": summarize(acc["publish"]),
            "audio_publish": summarize(acc["audio_publish"]),
            "frame_fill": summarize(acc["fill"]),
            "errors": errors[v.name],
            "middleware_warnings": sorted(warnings[v.name])[:20],
        }
    reference = report["variants"].get("default")
    for entry in report["variants"].values():
        entry["ratio_to_default"] = {
            key: ratio(entry[key]["median_ms"], reference[key]["median_ms"] if reference else None)
            for key in ("audio_latency", "frame_latency", "frame_publish")
        }
    return report


def markdown_table(report: dict[str, Any]) -> str:
    """The report as a Markdown table (milliseconds; ratios of medians to ``default``)."""
    lines = [
        "| variant | audio ms median / p90 | frame ms median / p90 | frame ratio"
        " | frames lost | publish() ms median / p90 | n frames |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in report["variants"].items():
        a, f, p = e["audio_latency"], e["frame_latency"], e["frame_publish"]
        lines.append(
            f"| {name} | {a['median_ms']} / {a['p90_ms']} | {f['median_ms']} / {f['p90_ms']}"
            f" | {e['ratio_to_default']['frame_latency']} | {f['lost']}"
            f" | {p['median_ms']} / {p['p90_ms']} | {f['n']} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line interface; ``--role`` is internal (child processes)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=40, help="frames per trial (default 40)")
    parser.add_argument(
        "--chunks", type=int, default=100, help="audio chunks per trial (default 100)"
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        help="variant to compare with 'default' (repeatable): a built-in name,"
        " the stem of a config/fastdds/*.xml file, or the path of an XML"
        " profile file",
    )
    parser.add_argument("--all", action="store_true", help="run every known variant")
    parser.add_argument("--list", action="store_true", help="list the variants and exit")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds; every variant runs once per round (default 3)",
    )
    parser.add_argument(
        "--subs", type=int, default=1, help="subscriber processes per trial (default 1)"
    )
    parser.add_argument(
        "--sub-profile",
        default=None,
        help="run every subscriber with this variant's settings instead of the"
        " publisher's (interoperability check)",
    )
    parser.add_argument(
        "--frame-rate", type=float, default=10.0, help="frames per second (default 10)"
    )
    parser.add_argument(
        "--domain-id",
        type=int,
        default=None,
        help="ROS_DOMAIN_ID for the children (default: random in 1..100)",
    )
    parser.add_argument(
        "--discovery-timeout",
        type=float,
        default=20.0,
        help="seconds to wait for the subscribers to match (default 20)",
    )
    parser.add_argument(
        "--linger",
        type=float,
        default=5.0,
        help="seconds the publisher waits for subscribers to leave (default 5)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set this variable in every child after the variant (repeatable),"
        " e.g. ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument(
        "--table", action="store_true", help="print a Markdown table to stderr after the JSON"
    )
    parser.add_argument("--role", choices=("pub", "sub"), default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--qos",
        choices=("reliable", "sensor_data"),
        default="reliable",
        help="both streams' QoS: 'reliable' (rclpy default: reliable, volatile,"
        " keep last 10) or 'sensor_data' (best effort, keep last 5)",
    )
    args = parser.parse_args(argv)
    if args.frames < 1 or args.chunks < 1 or args.rounds < 1 or args.subs < 1:
        parser.error("--frames, --chunks, --rounds and --subs must be at least 1")
    if args.frame_rate <= 0:
        parser.error("--frame-rate must be positive")
    if any("=" not in item for item in args.env):
        parser.error("--env takes KEY=VALUE")
    args.env = dict(item.split("=", 1) for item in args.env)
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: a child role, or the driver."""
    args = parse_args(argv)
    if args.role is not None:
        try:
            result = run_publisher(args) if args.role == "pub" else run_subscriber(args)
        except BenchmarkError as err:
            print(f"transport benchmark {args.role}: {err}", file=sys.stderr)
            return 1
        print(json.dumps(result))
        return 0

    known = all_variants()
    if args.list:
        for v in known.values():
            print(f"{v.name:16s} {v.description}")
        return 0
    for name in args.profile + ([args.sub_profile] if args.sub_profile else []):
        if name.endswith(".xml") and Path(name).is_file():
            known[name] = profile_variant(Path(name))  # an XML file outside config/fastdds
    names = [*known] if args.all else ["default", *args.profile]
    unknown = [n for n in [*names, args.sub_profile] if n is not None and n not in known]
    if unknown:
        print(f"unknown variant(s) {unknown}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    variants = [known[n] for n in dict.fromkeys(names)]
    report = run_benchmark(variants, known[args.sub_profile] if args.sub_profile else None, args)
    write_result(report, args.json)
    if args.table:
        print(markdown_table(report), file=sys.stderr)
    failed = all(not e["frame_latency"]["n"] for e in report["variants"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
