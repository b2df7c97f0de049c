"""The ``omniflow`` command: run the graph, record and replay bags, and the demo.

    omniflow run --profile pc|pi|replay|split-robot|split-dialogue [--bag BAG]
                 [--params-file F] [--namespace NS]
    omniflow record [--topics T ...] [-o DIR] [--duration S] [--min-free-mb MB]
    omniflow replay BAG [--rate R] [--clock] [--loop] [--topics T ...] [--with-graph]
    omniflow demo [--bag BAG | --audio F.wav --video F] [--out DIR]
    omniflow doctor [--profile pc|pi|replay|split-...] [--json] [--skip llm,coral,tts]

``run`` starts one process per node (through ``omniflow.launcher``), the same shape as
``ros2 launch`` on a robot, rather than one process with a multi-threaded executor:

- crash isolation: the engines are native code (pocketsphinx, TFLite, espeak-ng, llama.cpp);
  a crash in one takes down that node only, and capture keeps running;
- respawn: a node that dies (a camera unplugged, a crash) is started again after a pause;
- the camera process (and a bag player) alone gets the large-frames Fast DDS profile (an
  environment variable is per process; it commits 16 MiB of shared memory in every process
  that loads it), the fusion process the frame-receiver one;
- the GIL: capture threads, the fusion slices and the LLM would share one interpreter lock in
  one process, and the fusion node's audio intake would wait behind the others' Python work.

Ctrl-C stops everything cleanly; ``record`` then closes its bag so it is complete and readable.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from omniflow.core.timing import NS_PER_S
from omniflow.errors import OmniflowError

# Polling period of the run loop (respawns, exits) and the record progress line.
_POLL_S = 0.5
# What `omniflow record` leaves free on the bag's disk (MB): room for the bag's last chunk and
# index, and for the rest of the system.
MIN_FREE_MB = 100.0


def _stop_event() -> threading.Event:
    """An event set by Ctrl-C or SIGTERM (instead of KeyboardInterrupt mid-write)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _status(text: str, *, end: str = "\n") -> None:
    tty = sys.stderr.isatty()
    if end == "" and not tty:
        return
    print(("\r" if tty and end == "" else "") + text, end=end, file=sys.stderr, flush=True)


def _init_ros():
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    context = rclpy.Context()
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    return context


# ----------------------------------------------------------------------------- run
def cmd_run(args: argparse.Namespace) -> int:
    from omniflow.graph import RESPAWN_DELAY_S, profile, profile_nodes
    from omniflow.launcher import Supervisor
    from omniflow.resources import share_dir

    chosen = profile(args.profile)
    if chosen.use_sim_time and args.bag is None:
        raise OmniflowError("profile 'replay' needs --bag: the bag stands in for the capture nodes")
    specs = profile_nodes(
        args.profile,
        str(share_dir()),
        args.namespace,
        log_level=args.log_level,
        params_file=args.params_file,
    )
    stop = _stop_event()
    _status(f"omniflow run --profile {args.profile}: {chosen.description}")
    _say_if_frames_cannot_use_shared_memory()
    supervisor = Supervisor(specs, {spec.name for spec in specs}, RESPAWN_DELAY_S, report=_status)
    try:
        for index, (name, process) in enumerate(supervisor.processes.items(), 1):
            _status(f"  [{index}/{len(specs)}] started {name} (pid {process.process.pid})")
        player_thread = None
        if args.bag is not None:
            _publish_frames_here()  # the nodes are started: they keep their own profiles
            _wait_until_ready(list(supervisor.processes.values()), args.namespace)
            player_thread = threading.Thread(
                target=_replay,
                daemon=True,
                name="player",
                args=(args.bag, args.namespace, args.rate, True, False, None, stop),
                # /clock keeps running after the bag until the last answer is done: a fusion
                # node behind on a busy machine otherwise never finished the last utterance.
                kwargs={"with_graph": True},
            )
            player_thread.start()
        while not stop.wait(_POLL_S):
            supervisor.poll()
            if player_thread is not None and not player_thread.is_alive():
                _status("the bag has been played; Ctrl-C to stop the nodes")
                player_thread = None
    finally:
        stop.set()
        _status("stopping the nodes")
        supervisor.close()
    return 0


def _wait_until_ready(processes: list, namespace: str) -> None:
    """Wait until the nodes are up (lifecycle nodes active), so a bag played into them is
    heard from its first message."""
    import rclpy

    from omniflow.demo import READY_TIMEOUT_S, Progress, wait_ready
    from omniflow.ros.monitor import spinning

    context = _init_ros()
    node = rclpy.create_node("omniflow_run_probe", namespace=namespace or "/", context=context)
    try:
        with spinning(node):
            wait_ready(node, processes, READY_TIMEOUT_S, Progress())
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


# ----------------------------------------------------------------------------- record
def cmd_record(args: argparse.Namespace) -> int:
    import rclpy

    from omniflow.bag import BagWriter
    from omniflow.graph import TOPICS
    from omniflow.ros.bag_io import Recorder
    from omniflow.ros.monitor import spinning

    if args.min_free_mb < 0:
        raise OmniflowError(f"--min-free-mb must be 0 or more, got {args.min_free_mb:g}")
    topics = args.topics or [spec.name for spec in TOPICS]
    out = args.output or Path(f"omniflow_{datetime.now(UTC):%Y%m%d_%H%M%S}")
    stop = _stop_event()
    # Under a file-size limit (ulimit -f), a write past it then fails with EFBIG, which closes
    # the bag, instead of SIGXFSZ killing the recorder with the bag open.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    context = _init_ros()
    node = rclpy.create_node("omniflow_recorder", namespace=args.namespace, context=context)
    began = time.monotonic()
    try:
        with (
            BagWriter(out, min_free_bytes=int(args.min_free_mb * 1_000_000)) as writer,
            spinning(node),
        ):
            recorder = Recorder(node, writer, topics, args.namespace)
            _status(f"recording into {out} (Ctrl-C to stop): {', '.join(topics)}")
            while not stop.wait(_POLL_S) and recorder.failure is None:
                elapsed = time.monotonic() - began
                counts = ", ".join(f"{k} {v}" for k, v in sorted(writer.counts.items()))
                _status(f"  {elapsed:6.1f} s  {counts or 'waiting for publishers'}", end="")
                if args.duration and elapsed >= args.duration:
                    break
            counts = recorder.close()
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
    _status("")
    if recorder.failure is not None:
        raise recorder.failure
    _status(
        f"closed {out}: "
        + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no messages")
    )
    for name, why in recorder.skipped.items():
        _status(f"  not recorded: {name} ({why})")
    return 0


# ----------------------------------------------------------------------------- replay
def _publish_frames_here() -> None:
    """Give this process the camera's large-frames Fast DDS profile (unless one is chosen),
    before it starts ROS: a player sends a bag's frames and audio from one participant, and
    with the default 512 KiB shared-memory segment most frames were lost, and audio chunks
    with them. Child processes started later inherit it."""
    import os

    from omniflow.graph import frame_publisher_env
    from omniflow.resources import share_dir

    os.environ.update(frame_publisher_env(str(share_dir())))


def _say_if_frames_cannot_use_shared_memory() -> None:
    """A warning when /dev/shm cannot hold the large-frames profile's segment: Fast DDS then
    sends that process's frames over UDP, saying only "SHM Transport is not supported in the
    current platform" (tested: test/integration/test_shm_fallback.py)."""
    from omniflow.core.doctor import FAIL
    from omniflow.doctor import check_shm

    check = check_shm()
    if check.verdict == FAIL:
        _status(f"warning: {check.detail}; {check.fix}")


def _replay(
    bag: Path,
    namespace: str,
    rate: float,
    clock: bool,
    loop: bool,
    topics: list[str] | None,
    stop: threading.Event,
    wait_s: float = 10.0,
    with_graph: bool = False,
) -> int:
    """Play ``bag``; ``with_graph``: the replay profile's nodes are being started beside the
    player (``replay.launch.py``), so wait until they are active, and after the bag keep /clock
    running until the dialogue has finished its last answer, as ``omniflow demo`` does."""
    import contextlib

    import rclpy

    from omniflow.bag import BagReader
    from omniflow.ros.bag_io import Player
    from omniflow.ros.monitor import spinning

    reader = BagReader(bag)
    for problem in reader.problems:
        _status(f"warning: {problem}")
    context = _init_ros()
    node = rclpy.create_node("omniflow_player", namespace=namespace, context=context)
    try:
        from omniflow.graph import graph_topic_name

        # Names as ros2 bag records them (/audio, /robot1/audio) go to the graph's relative
        # names, so --namespace places them.
        remap = {name: graph_topic_name(name) for name in reader.topics}
        player = Player(
            node, reader, topics=topics, namespace=namespace, rate=rate, clock=clock, remap=remap
        )
        for name, why in player.stats.skipped_topics.items():
            _status(f"warning: not playing {name}: {why}")
        with spinning(node) if with_graph else contextlib.nullcontext():
            graph = _graph_ready(node, namespace) if with_graph else {}
            _status(f"waiting up to {wait_s:g} s for subscribers on {', '.join(player.topics)}")
            missing = player.wait_for_subscribers(wait_s)
            if missing:
                _status(f"  no subscriber yet on {', '.join(missing)}; playing anyway")

            def progress(done_ns: int, total_ns: int) -> None:
                _status(
                    f"  played {done_ns / NS_PER_S:6.1f} / {total_ns / NS_PER_S:.1f} s (bag time)",
                    end="",
                )

            stats = player.play(
                loop=loop, stop=stop, progress=progress, preroll_s=0.5 if clock else 0.0, **graph
            )
        _status("")
        _status(
            "published "
            + ", ".join(f"{k} {v}" for k, v in sorted(stats.published.items()))
            + (f" ({stats.loops} loops)" if stats.loops else "")
        )
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
    return 0


def _graph_ready(node, namespace: str) -> dict[str, object]:
    """Wait until the replay profile's nodes are active under ``namespace``; the arguments
    of ``Player.play`` that keep /clock running until the dialogue is listening again."""
    from omniflow.demo import (
        ANSWER_WAIT_S,
        READY_TIMEOUT_S,
        TAIL_S,
        Progress,
        listening_again,
        wait_active,
    )
    from omniflow.graph import PROFILES

    nodes = PROFILES["replay"].nodes
    listening = listening_again(node, "dialogue" in nodes)
    _status(f"waiting up to {READY_TIMEOUT_S:g} s for {', '.join(nodes)} to be active")
    wait_active(node, nodes, namespace, READY_TIMEOUT_S, Progress(quiet=True))
    return {"tail_s": TAIL_S, "until": listening.is_set, "until_max_s": ANSWER_WAIT_S}


def cmd_replay(args: argparse.Namespace) -> int:
    _publish_frames_here()
    _say_if_frames_cannot_use_shared_memory()
    return _replay(
        args.bag,
        args.namespace,
        args.rate,
        args.clock,
        args.loop,
        args.topics,
        _stop_event(),
        args.wait,
        args.with_graph,
    )


# ----------------------------------------------------------------------------- main
def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="omniflow", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the graph, one process per node")
    run.add_argument(
        "--profile",
        choices=("pc", "pi", "replay", "split-robot", "split-dialogue"),
        default="pc",
        help="pc: robot PC; pi: Raspberry Pi 5 + Coral; replay: a bag instead "
        "of the capture nodes (needs --bag); split-robot and split-dialogue: the two "
        "halves of a graph over two hosts",
    )
    run.add_argument("--bag", type=Path, help="play this bag into the graph (with /clock)")
    run.add_argument("--rate", type=float, default=1.0, help="playback rate of --bag")
    run.add_argument("--params-file", help="YAML keyed by node name instead of the profile's")
    run.add_argument("--namespace", default="", help="namespace of every node")
    run.add_argument("--log-level", default="info", help="debug, info, warn, error")

    record = sub.add_parser("record", help="record topics into an MCAP bag")
    record.add_argument(
        "--topics",
        nargs="+",
        help="topics (relative to the namespace); default: every topic of the graph",
    )
    record.add_argument(
        "-o",
        "--output",
        type=Path,
        help="bag directory to create (default: omniflow_<UTC date>_<time>)",
    )
    record.add_argument("--duration", type=float, help="stop after this many seconds")
    record.add_argument("--namespace", default="", help="namespace of the graph")
    record.add_argument(
        "--min-free-mb",
        type=float,
        default=MIN_FREE_MB,
        help="stop and close the bag when less than this is free on its disk (MB; 0: write "
        "until a write fails, then close the bag at its last complete chunk)",
    )

    replay = sub.add_parser("replay", help="publish a bag with its original timing")
    replay.add_argument("bag", type=Path, help="MCAP file or rosbag2 directory")
    replay.add_argument("--rate", type=float, default=1.0, help="rate factor (2: twice as fast)")
    replay.add_argument(
        "--clock",
        action="store_true",
        help="publish /clock from the bag's time, for nodes with use_sim_time",
    )
    replay.add_argument(
        "--loop", action="store_true", help="play again at the end (the clock keeps going forward)"
    )
    replay.add_argument("--topics", nargs="+", help="only these topics")
    replay.add_argument("--namespace", default="", help="namespace to publish into")
    replay.add_argument(
        "--wait",
        type=float,
        default=10.0,
        help="seconds to wait for subscribers before the first message",
    )
    replay.add_argument(
        "--with-graph",
        action="store_true",
        help="the replay profile's nodes start beside the player (replay.launch.py): wait "
        "until they are active, and after the bag keep /clock running until the dialogue's "
        "last answer is done",
    )

    sub.add_parser(
        "demo", help="the graph on the bundled session (omniflow demo --help)", add_help=False
    )

    from omniflow import doctor

    doctor.add_arguments(
        sub.add_parser("doctor", help="check this machine for a profile: devices, models, ROS")
    )
    return top


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:  # its own options (omniflow demo --help)
        from omniflow import demo

        return demo.main(argv[1:])
    args = parser().parse_args(argv)
    from omniflow.doctor import cmd_doctor

    commands = {"run": cmd_run, "record": cmd_record, "replay": cmd_replay, "doctor": cmd_doctor}
    try:
        return commands[args.command](args)
    except OmniflowError as err:
        print(f"omniflow {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
