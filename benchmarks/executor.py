#!/usr/bin/env python3
"""The dialogue node's executor against Jazzy's MultiThreadedExecutor, on the node's shape.

A node like the dialogue node's inputs: one mutually exclusive callback group holding a
camera subscription (sensor-data QoS, depth 5, 64x48 frames at 30/s, sent from a process of
its own, as a camera driver's) and a 50 ms timer, spun the way :func:`omniflow.ros.run._spin` spins
(``spin_once`` with a 0.1 s timeout) by four threads. Each executor runs ``--seconds``, one
after the other in this process, over the same DDS: rclpy's ``MultiThreadedExecutor`` (the
baseline) and :class:`omniflow.ros.executors.QueuedOnceExecutor`.

Printed for each: frames received of those sent; send -> callback latency of each frame (ms:
median, p90, max); the gaps between timer calls (ms: median, p90, max); the process's CPU
time per second; and the ratios of ours to the baseline (frames received, latency p90,
the longest gap between ticks, CPU). A benchmark prints figures; it does
not fail.

    .venv/bin/python benchmarks/executor.py --seconds 10 --json build/bench/executor.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import rclpy
from _common import SPREAD, cpu_hog, ratio, summary, write_result
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from sensor_msgs.msg import Image

from omniflow.ros.conversions import ns_from_time
from omniflow.ros.executors import QueuedOnceExecutor
from omniflow.ros.qos import SENSOR_DATA

FRAME_HZ = 30.0
TICK_S = 0.05
THREADS = 4
_PIXELS = np.zeros((48, 64, 3), np.uint8).tobytes()


def run(executor_type, seconds: float, context) -> dict:
    node = rclpy.create_node(f"executor_{executor_type.__name__.lower()}", context=context)
    group = MutuallyExclusiveCallbackGroup()
    latencies_ms: list[float] = []
    ticks: list[float] = []
    topic = f"frames_{executor_type.__name__.lower()}"
    node.create_subscription(
        Image,
        topic,
        lambda m: latencies_ms.append((time.time_ns() - ns_from_time(m.header.stamp)) / 1e6),
        SENSOR_DATA,
        callback_group=group,
    )
    node.create_timer(TICK_S, lambda: ticks.append(time.monotonic()), callback_group=group)
    executor = executor_type(THREADS, context=context)
    executor.add_node(node)
    halt = threading.Event()

    def spin() -> None:
        while not halt.is_set():
            executor.spin_once(timeout_sec=0.1)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    camera = subprocess.Popen(
        [sys.executable, __file__, "--camera", topic, "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    camera.stdout.readline()  # it found this node's subscription
    cpu, began = time.process_time(), time.monotonic()
    sent = int(camera.communicate(timeout=seconds + 60)[0].split()[-1])
    time.sleep(0.3)  # the last frames arrive
    elapsed = time.monotonic() - began
    cpu_per_s = (time.process_time() - cpu) / elapsed
    halt.set()
    spinner.join(5)
    executor.shutdown()
    node.destroy_node()
    window = [t for t in ticks if t >= began]
    gaps_ms = np.diff(window) * 1e3 if len(window) > 1 else []
    return {
        "frames_sent": sent,
        "frames_received": len(latencies_ms),
        "latency_ms": summary(latencies_ms, 1, figures=SPREAD),
        "tick_gap_ms": summary(gaps_ms, 1, figures=SPREAD),
        "cpu_s_per_s": round(cpu_per_s, 3),
    }


def camera(topic: str, seconds: float) -> None:
    """The camera's process: 30 frames/s on ``topic`` for ``seconds``, each stamped with the
    wall clock as it is sent; prints a line when the subscriber is matched, then the count."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("camera", context=context)
    publisher = node.create_publisher(Image, topic, SENSOR_DATA)
    while publisher.get_subscription_count() < 1:
        time.sleep(0.05)
    print("matched", flush=True)
    msg = Image(height=48, width=64, encoding="rgb8", step=64 * 3, data=_PIXELS)
    sent, began = 0, time.monotonic()
    while time.monotonic() < began + seconds:
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
        publisher.publish(msg)
        sent += 1
        time.sleep(max(began + sent / FRAME_HZ - time.monotonic(), 0.0))
    print(sent, flush=True)
    node.destroy_node()
    rclpy.shutdown(context=context)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="each executor's run")
    parser.add_argument("--hog-cores", type=int, default=0, help="cores kept busy meanwhile")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--camera", metavar="TOPIC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.camera:
        camera(args.camera, args.seconds)
        return 0
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        with cpu_hog(args.hog_cores) if args.hog_cores else nullcontext({}) as hog:
            baseline = run(MultiThreadedExecutor, args.seconds, context)
            ours = run(QueuedOnceExecutor, args.seconds, context)
    finally:
        rclpy.shutdown(context=context)
    result = {
        "seconds": args.seconds,
        "hog_cores": args.hog_cores,
        "hog": hog,
        "baseline_rclpy": baseline,
        "queued_once": ours,
        "ratio_frames_received": ratio(ours["frames_received"], baseline["frames_received"]),
        "ratio_latency_p90": ratio(ours["latency_ms"]["p90"], baseline["latency_ms"]["p90"]),
        "ratio_tick_gap_max": ratio(ours["tick_gap_ms"]["max"], baseline["tick_gap_ms"]["max"]),
        "ratio_cpu": ratio(ours["cpu_s_per_s"], baseline["cpu_s_per_s"]),
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
