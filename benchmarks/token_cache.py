#!/usr/bin/env python3
"""The token ring as a message_filters filter: omniflow's TokenCache against
``message_filters.Cache`` (ROS 2 Jazzy), call by call, in one run.

Method (prints one JSON object): for each cache size, both filters are fed the same stream of
``sensor_msgs/Image`` headers (30 frames/s, in stamp order: the case where both give the same
answers) from one ``message_filters.SimpleFilter``; once full, each call below is timed
``--calls`` times per round, alternating between the two filters, over ``--rounds`` rounds:

- ``add``: one more message (what a subscription callback pays);
- ``before`` / ``after``: ``getElemBeforeTime`` / ``getElemAfterTime`` at a random time
  inside the held span (what "the frame at the speech onset" costs);
- ``interval``: ``getInterval`` over a random 200 ms window (the association window).

Figures are median and p90 in microseconds per call, and the ratio TokenCache / Cache of the
medians (below 1: TokenCache is faster). Cache scans its whole list on every query; the ring
bisects (O(log n)), and pays for its bookkeeping on ``add``.

``message_filters`` is not on PyPI: a ROS install's is used, else the Jazzy sources in
``../shared/vendor/ros-jazzy/message_filters`` beside the checkout.

    .venv/bin/python benchmarks/token_cache.py --sizes 30 128 1024 --json /tmp/token_cache.json
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from _common import ratio, summary, write_result

REPO = Path(__file__).resolve().parents[1]
FRAME_NS = 33_333_333
T0 = 1_767_225_600 * 1_000_000_000
OPERATIONS = ("add", "before", "after", "interval")


def import_message_filters():
    try:
        import message_filters

        return message_filters
    except ImportError:
        pass
    for parent in REPO.parents:
        vendor = parent / "shared" / "vendor" / "ros-jazzy" / "message_filters"
        if (vendor / "message_filters" / "__init__.py").is_file():
            sys.path.insert(0, str(vendor))
            import message_filters

            return message_filters
    raise SystemExit(
        "message_filters is not installed (not on PyPI) and ../shared/vendor/ros-jazzy/"
        "message_filters is absent: nothing to compare with"
    )


def timed_call(f, op: str, message, t, end) -> float:
    """Microseconds one call of ``op`` on the filter ``f`` takes."""
    began = time.perf_counter_ns()
    if op == "add":
        f.add(message)
    elif op == "before":
        f.getElemBeforeTime(t)
    elif op == "after":
        f.getElemAfterTime(t)
    else:
        f.getInterval(t, end)
    return (time.perf_counter_ns() - began) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 128, 1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400, help="timed calls per round and op")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)

    mf = import_message_filters()
    from rclpy.clock import ClockType
    from rclpy.time import Time
    from sensor_msgs.msg import Image

    from omniflow.ros.conversions import header
    from omniflow.ros.token_cache import TokenCache

    rng = random.Random(0)
    result: dict[str, object] = {"message_filters": mf.__file__, "sizes": {}}
    for size in args.sizes:
        source = mf.SimpleFilter()
        filters = {
            "Cache": mf.Cache(source, cache_size=size),
            "TokenCache": TokenCache(source, cache_size=size),
        }
        for count in range(size):
            source.signalMessage(Image(header=header(T0 + count * FRAME_NS, "camera")))
        count = size
        samples: dict[str, dict[str, list[float]]] = {
            name: {op: [] for op in OPERATIONS} for name in filters
        }
        for _ in range(args.rounds):
            for op in OPERATIONS:
                for _ in range(args.calls):
                    oldest = T0 + (count - size) * FRAME_NS
                    newest = T0 + (count - 1) * FRAME_NS
                    at = rng.randrange(oldest, newest + 1)
                    t = Time(nanoseconds=at, clock_type=ClockType.ROS_TIME)
                    end = Time(nanoseconds=at + 200_000_000, clock_type=ClockType.ROS_TIME)
                    message = Image(header=header(T0 + count * FRAME_NS, "camera"))
                    for name in rng.sample(list(filters), 2):  # alternate who goes first
                        took = timed_call(filters[name], op, message, t, end)
                        samples[name][op].append(took)
                    if op == "add":
                        count += 1  # both filters took the same message
        entry: dict[str, object] = {}
        for op in OPERATIONS:
            figures = {name: summary(samples[name][op], 2) for name in filters}
            entry[op] = {
                "Cache_us": figures["Cache"],
                "TokenCache_us": figures["TokenCache"],
                "ratio_median": ratio(figures["TokenCache"]["median"], figures["Cache"]["median"]),
            }
        result["sizes"][str(size)] = entry
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
