#!/usr/bin/env python3
"""Cost of recording and reading bags with rosbags, against plain file writes of the same bytes.

The messages are the bundled sample session's (12 s: 300 audio chunks of 1.3 KB, 180 frames of
230 KB, 153 played-audio blocks; 42 MB of CDR). Each round, interleaved so machine load hits
all variants alike:

- baseline: the same raw bytes appended to one file (buffered writes, no fsync: the bag
  writer does not fsync either);
- ``BagWriter`` with zstd chunk compression (what ``omniflow record`` writes), and without;
- ``BagReader`` reading every message back (the compressed bag), and decoding them all;
- the salvaging scanner on the same bag cut in half (what a killed recording leaves; its
  MB/s counts the whole session although it reads about half).

Reported: median and p90 over ``--rounds`` of the time per pass (ms), throughput (MB/s of CDR),
per-message cost (µs), file size, and each variant's ratio to the baseline of the same round.
A recorder must keep up with the stream it records: the session is 12 s of real time, so a
write pass far under 12 s is the margin. Prints JSON; ``--json PATH`` also writes it.

    .venv/bin/python benchmarks/bag_io.py --json build/bench/bag_io.json
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import median, summary, write_result

from omniflow.bag import BagReader, BagWriter, decode
from omniflow.resources import sample


def _write_raw(messages, path: Path) -> None:
    with path.open("wb") as stream:
        for message in messages:
            stream.write(message.raw)


def _write_bag(messages, path: Path, compress: bool) -> None:
    with BagWriter(path, compress=compress) as writer:
        for message in messages:
            writer.add_topic(message.topic, message.msgtype)
            writer.write(message.topic, message.timestamp_ns, message.raw)


def _read(path: Path, decoded: bool) -> int:
    count = 0
    for message in BagReader(path).messages():
        if decoded:
            decode(message.raw, message.msgtype)
        count += 1
    return count


def _timed(action: Callable[..., object], *args: object) -> float:
    began = time.perf_counter()
    action(*args)
    return (time.perf_counter() - began) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    messages = list(BagReader(sample("session.mcap")).messages())
    total_bytes = sum(len(m.raw) for m in messages)
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "baseline_raw_write",
            "bag_write_zstd",
            "bag_write_plain",
            "bag_read",
            "bag_read_decode",
            "salvage_truncated_read",
        )
    }
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        for k in range(args.rounds):
            raw = tmp_path / f"raw{k}"
            zstd_bag, plain_bag = tmp_path / f"zstd{k}", tmp_path / f"plain{k}"
            times["baseline_raw_write"].append(_timed(_write_raw, messages, raw))
            times["bag_write_zstd"].append(_timed(_write_bag, messages, zstd_bag, True))
            times["bag_write_plain"].append(_timed(_write_bag, messages, plain_bag, False))
            times["bag_read"].append(_timed(_read, zstd_bag, False))
            times["bag_read_decode"].append(_timed(_read, zstd_bag, True))
            (mcap,) = zstd_bag.glob("*.mcap")
            cut = tmp_path / f"cut{k}.mcap"
            data = mcap.read_bytes()
            cut.write_bytes(data[: len(data) // 2])
            times["salvage_truncated_read"].append(_timed(_read, cut, False))
            sizes = {
                "raw": raw.stat().st_size,
                "bag_zstd": sum(p.stat().st_size for p in zstd_bag.iterdir()),
                "bag_plain": sum(p.stat().st_size for p in plain_bag.iterdir()),
            }
            for path in (raw, cut):
                path.unlink()
            shutil.rmtree(zstd_bag)
            shutil.rmtree(plain_bag)
    baseline = times["baseline_raw_write"]
    figures = {}
    for name, values in times.items():
        middle = statistics.median(values)
        figures[name] = {
            **summary(values, 1, suffix="_ms", count=None),
            "mb_per_s": round(total_bytes / 1e6 / (middle / 1000), 1),
            "us_per_message": round(middle * 1000 / len(messages), 1),
            "ratio_to_baseline": median((v / b for v, b in zip(values, baseline, strict=True)), 2),
        }
    report = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "messages": len(messages),
        "cdr_mb": round(total_bytes / 1e6, 1),
        "session_seconds": 12.0,
        "rounds": args.rounds,
        "figures": figures,
        "file_mb": {k: round(v / 1e6, 2) for k, v in sizes.items()},
    }
    write_result(report, args.json)


if __name__ == "__main__":
    main()
