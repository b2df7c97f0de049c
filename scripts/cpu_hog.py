#!/usr/bin/env python3
"""Keep CPU cores busy: a load to run the tests and benchmarks under.

Each busy core is one process spinning in Python (no I/O, no memory growth), so the scheduler
shares those cores between it and whatever else runs, as a busy robot computer would.

Usage::

    python scripts/cpu_hog.py                      # one core, until Ctrl-C
    python scripts/cpu_hog.py --cores 2 --seconds 600
    python scripts/cpu_hog.py & make test; kill -INT $!   # make test with one core busy

Ctrl-C or SIGTERM stops every worker; it exits 0 and prints, as its last line, a JSON object
with the cores, the wall time and the CPU time its workers used (close to cores x wall when
they got the cores they asked for). ``benchmarks/intake.py --hog-cores N`` runs it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time

# Iterations between two looks at the stop event: a few milliseconds of work.
_SPIN = 200_000


def _spin(stop: threading.Event, seconds: float) -> None:
    # Ctrl-C reaches the whole process group: the parent stops us. SIGINT was blocked from
    # before this process began (see hog), so one during start-up is not a traceback here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    deadline = time.monotonic() + seconds if seconds > 0 else float("inf")
    while not stop.is_set() and time.monotonic() < deadline:
        for _ in range(_SPIN):
            pass


def hog(cores: int, seconds: float, stop: threading.Event) -> dict[str, float]:
    """Keep ``cores`` cores busy for ``seconds`` (0: until ``stop``); what was used."""
    context = multiprocessing.get_context("spawn")
    worker_stop = context.Event()
    workers = [
        context.Process(target=_spin, args=(worker_stop, seconds), name=f"cpu_hog-{k}")
        for k in range(cores)
    ]
    began = time.monotonic()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # inherited by the workers
    try:
        for worker in workers:
            worker.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a pending one: stop
    print(f"cpu_hog: {cores} busy core(s), pid {os.getpid()}", file=sys.stderr, flush=True)
    while any(worker.is_alive() for worker in workers):
        if stop.wait(0.2):
            worker_stop.set()
            break
    for worker in workers:
        worker.join()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "cores": cores,
        "wall_s": round(time.monotonic() - began, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=1, help="cores to keep busy (default 1)")
    parser.add_argument(
        "--seconds", type=float, default=0.0, help="how long (default 0: until Ctrl-C)"
    )
    args = parser.parse_args(argv)
    available = os.cpu_count() or 1
    if not 1 <= args.cores <= available:
        parser.error(f"--cores must be between 1 and this machine's {available}, got {args.cores}")
    if args.seconds < 0:
        parser.error(f"--seconds must be 0 (until Ctrl-C) or more, got {args.seconds:g}")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(json.dumps(hog(args.cores, args.seconds, stop)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
