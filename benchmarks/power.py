#!/usr/bin/env python3
"""CPU cost of the power manager node at its 1 Hz period, for the issue's target (< 1 % of a
core) and regressions.

Measured, in one run, every process started at the same time and sampled over the same
window (after a warm-up):

* ``baseline``: an rclpy node that does nothing (same rclpy, Fast DDS, executor): what any
  node costs on this machine, DDS discovery and heartbeats included;
* ``power_manager``: the node on the real /sys and /proc, no targets (telemetry, policy,
  PowerState and /diagnostics every second);
* ``power_manager_failing``: the same with camera, vision and LLM targets that nobody runs,
  so every period also tries three targets and logs (throttled) their failures.

CPU % = (utime + stime from /proc/<pid>/stat over the window) / wall time of the window, in
% of one core; ``overhead`` = variant - baseline. ``--rounds`` repeats the whole run and
reports medians. Also, in this process and without ROS, the median cost of one telemetry
sample on this machine and one policy step (µs). Prints JSON; ``--json PATH`` also writes it.
A benchmark prints figures; it does not fail on a slow machine.

    .venv/bin/python benchmarks/power.py --seconds 60 --json build/bench/power.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from _common import difference, median, ratio, write_result

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def idle_node() -> int:
    """The baseline: an rclpy node spinning with nothing to do."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    rclpy.init()
    node = rclpy.create_node("idle_baseline")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    return 0


def run_round(seconds: float, warmup: float) -> dict[str, float]:
    import subprocess

    from omniflow.launcher import NodeProcess, NodeSpec

    ns = f"/bench{os.getpid()}"
    none = {"targets.camera": "", "targets.vision": "", "targets.llm": ""}
    failing = {
        "targets.camera": "no_camera",
        "targets.vision": "no_fusion",
        "targets.llm": "no_dialogue",
    }
    processes = {
        "power_manager": NodeProcess(
            NodeSpec("omniflow.nodes.power_manager", "power_manager", none, namespace=ns)
        ),
        "power_manager_failing": NodeProcess(
            NodeSpec("omniflow.nodes.power_manager", "power_manager_failing", failing, namespace=ns)
        ),
    }
    baseline = subprocess.Popen(
        [sys.executable, __file__, "--idle-node"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids = {"baseline": baseline.pid, **{name: p.process.pid for name, p in processes.items()}}
    try:
        time.sleep(warmup)
        start_wall = time.monotonic()
        start = {name: cpu_seconds(pid) for name, pid in pids.items()}
        time.sleep(seconds)
        wall = time.monotonic() - start_wall
        end = {name: cpu_seconds(pid) for name, pid in pids.items()}
        for name, process in processes.items():
            if not process.running:
                raise RuntimeError(f"{name} exited:\n{process.output()}")
            if "mode start ->" not in process.output():
                raise RuntimeError(f"{name} never decided a mode:\n{process.output()}")
    finally:
        for process in processes.values():
            process.close()
        baseline.terminate()
        baseline.wait(10)
    return {name: 100.0 * (end[name] - start[name]) / wall for name in pids}


def micro(repeats: int) -> dict[str, float]:
    from omniflow.core.power_policy import PolicyInput, PowerPolicy
    from omniflow.devices.sysfs import TelemetryReader

    reader = TelemetryReader("/")
    samples = []
    for index in range(repeats):
        begin = time.perf_counter()
        reader.sample(float(index))
        samples.append((time.perf_counter() - begin) * 1e6)
    policy = PowerPolicy()
    steps = []
    for index in range(repeats):
        inp = PolicyInput(
            now_s=float(index), conversation=index % 7 == 0, temperature_c=35.0, power_w=1.5
        )
        begin = time.perf_counter()
        policy.step(inp)
        steps.append((time.perf_counter() - begin) * 1e6)
    return {
        "telemetry_sample_us_median": median(samples, 1),
        "policy_step_us_median": median(steps, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window (s)")
    parser.add_argument("--warmup", type=float, default=5.0, help="before the window (s)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    parser.add_argument("--idle-node", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.idle_node:
        return idle_node()
    rounds = [run_round(args.seconds, args.warmup) for _ in range(args.rounds)]
    cpu = {name: median((r[name] for r in rounds), 3) for name in rounds[0]}
    result = {
        "method": "process CPU time / wall time over the window, % of one core; median of "
        "rounds; all processes measured at once",
        "seconds": args.seconds,
        "rounds": args.rounds,
        "period_s": 1.0,
        "cpu_percent": cpu,
        "cpu_percent_per_round": [{k: round(v, 3) for k, v in r.items()} for r in rounds],
        "resolution_percent": round(100.0 / CLOCK_TICKS / args.seconds, 3),
        "overhead_percent": {
            name: difference(value, cpu["baseline"], 3)
            for name, value in cpu.items()
            if name != "baseline"
        },
        "ratio_to_baseline": {
            name: ratio(value, cpu["baseline"], 2)
            for name, value in cpu.items()
            if name != "baseline"
        },
        "target_percent": 1.0,
        **micro(1000),
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
