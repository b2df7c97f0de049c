"""The entry point shared by the node executables: start one node, spin it, stop it cleanly.

Stopping is the part that needs care. rclpy's own SIGINT handler shuts the ROS context down
the moment the signal arrives, while the node's worker threads (a decode, a speaker's output
thread) are still running: their next publish fails ("publisher's context is invalid") and a
thread still inside a native engine at interpreter exit aborts the process. So the node
executables take SIGINT and SIGTERM themselves, and stop in order, with the context still
valid until the end:

1. the node is deactivated if it is active (its workers stop, a goal in progress ends with
   its reason, the latched state says so), while the executor still delivers what that
   sends;
2. the executor's thread stops taking work and is joined, the callbacks it handed to a
   thread pool finish, and only then is the executor shut down: rclpy 7.1's
   ``Executor.shutdown`` does not wait for callbacks in flight (its wait is skipped), and
   destroys the guard condition a pool thread may be about to trigger ("cannot use
   Destroyable because destruction was requested");
3. the node releases what it holds (devices, models, native engines) and is destroyed;
4. the context is shut down; the exit code is 0.

The process is the node's, so the node also settles its Python heap at the end of each
transition and keeps CPython's free lists from filling
(:class:`~omniflow.engines.memory.PythonHeap`, ticked by the node's diagnostics timer).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import rclpy
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from omniflow.core.doctor import FAIL, shared_memory, shm_segment_bytes
from omniflow.engines.memory import PythonHeap
from omniflow.errors import ConfigError

# Signals that stop a node executable (Ctrl-C; what launch and systemd send).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Time the executor's thread, and the callbacks in flight, get to return at a stop.
_SPIN_JOIN_S = 5.0
# How long one turn of the executor's loop waits for work before it looks at the halt event.
_SPIN_ONCE_S = 0.1
# How often the main thread looks whether a stop signal came. It polls rather than waits on
# the event: the handler runs on the main thread and sets that event, which would deadlock
# if the signal arrived while the main thread held the event's lock inside wait().
_POLL_S = 0.1


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[threading.Event]:
    """An event set by any of ``signals`` while the block runs (the previous handlers are
    restored after it); a second signal while stopping changes nothing. Poll it with
    ``is_set()`` on the main thread (see ``_POLL_S``)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in signals}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_node(
    node_factory: Callable[[], Node],
    args: list[str] | None = None,
    *,
    executor_factory: Callable[[], Executor] = SingleThreadedExecutor,
) -> int:
    """Run a node until SIGINT or SIGTERM; the entry point of the node executables.

    The node has a ``params`` dict and a ``release()`` that frees what it holds in any state
    (every :class:`~omniflow.ros.lifecycle.LifecycleBase`); a lifecycle node with
    ``autostart`` configures and activates itself. It spins on a single-threaded executor by
    default (on a thread of its own, so the main thread is free to take the signals): its
    callbacks only buffer, workers do the rest on their own threads. A node whose callbacks
    wait (the dialogue node's action goals) passes a multi-threaded one. The stop goes in
    the order the module docstring gives.

    Returns 0 once stopped by a signal, 1 when a callback raised out of the executor (the
    node is stopped in the same order), 2 when the node cannot start (a bad parameter),
    with the reason logged.
    """
    with stop_on_signals() as stop:
        shm_shortfall = _shm_shortfall(os.environ)  # before the participant takes its share
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        if shm_shortfall:
            rclpy.logging.get_logger("omniflow").warning(shm_shortfall)
        try:
            node = node_factory()
        except (InvalidParameterValueException, InvalidParameterTypeException, ConfigError) as err:
            rclpy.logging.get_logger("omniflow").fatal(f"cannot start: {err}")
            rclpy.try_shutdown()
            return 2
        if hasattr(node, "python_heap"):
            node.python_heap = PythonHeap()
        executor = executor_factory()
        executor.add_node(node)
        failed: list[BaseException] = []
        halt = threading.Event()  # the executor's thread: take no more work
        spinner = threading.Thread(
            target=_spin, args=(executor, halt, stop, failed), name="executor", daemon=True
        )
        try:
            if isinstance(node, LifecycleNode) and node.params.get("autostart", False):
                configured = not stop.is_set() and (
                    node.trigger_configure() == TransitionCallbackReturn.SUCCESS
                )
                if configured and not stop.is_set():
                    node.trigger_activate()
            spinner.start()
            while not stop.is_set():
                time.sleep(_POLL_S)
        finally:
            _stop(node, executor, spinner, halt)
    return 1 if failed else 0


def _shm_shortfall(env: Mapping[str, str], shm: str = "/dev/shm") -> str:
    """What goes wrong, and what to do, when /dev/shm cannot hold the shared-memory segment of
    the Fast DDS profile this process loads (the camera's large-frames one): Fast DDS then
    drops that transport, saying only "SHM Transport is not supported in the current
    platform". Empty when it fits or no profile asks for a segment."""
    path = env.get("FASTRTPS_DEFAULT_PROFILES_FILE") or env.get("FASTDDS_DEFAULT_PROFILES_FILE")
    try:
        segment = shm_segment_bytes(Path(path).read_text(encoding="utf-8")) if path else 0
        check = shared_memory(shutil.disk_usage(shm).free, segment, processes=1)
    except OSError:
        return ""  # no profile to read (Fast DDS says so itself), or no /dev/shm to measure
    return f"{check.detail} ({path}); {check.fix}" if segment and check.verdict == FAIL else ""


def _spin(
    executor: Executor,
    halt: threading.Event,
    stop: threading.Event,
    failed: list[BaseException],
) -> None:
    """The executor's thread: spin until ``halt``; a callback's exception stops the node."""
    try:
        while not halt.is_set() and executor.context.ok():
            executor.spin_once(timeout_sec=_SPIN_ONCE_S)
    except ExternalShutdownException:
        pass
    except Exception as err:  # noqa: BLE001 - the node stops, in order, and the exit code says so
        failed.append(err)
        rclpy.logging.get_logger("omniflow").fatal(
            f"a callback raised; stopping the node:\n{traceback.format_exc()}"
        )
    finally:
        stop.set()


def _stop(node: Node, executor: Executor, spinner: threading.Thread, halt: threading.Event) -> None:
    """Deactivate, stop the executor, release, destroy, shut the context down: in order."""
    if isinstance(node, LifecycleNode) and getattr(node, "state_text", "") == "active":
        node.trigger_deactivate()
    halt.set()
    if spinner.is_alive():
        spinner.join(_SPIN_JOIN_S)
    _wait_for_callbacks(executor, _SPIN_JOIN_S)
    executor.shutdown(timeout_sec=_SPIN_JOIN_S)
    if getattr(node, "python_heap", None) is not None:
        node.python_heap.close()  # before the release: no collection to settle a heap at exit
        node.python_heap = None
    node.release()
    node.destroy_node()
    rclpy.try_shutdown()


def _wait_for_callbacks(executor: Executor, timeout_s: float) -> None:
    """Wait until the callbacks a multi-threaded executor handed to its pool have returned
    (rclpy keeps their tasks in ``_futures``; a single-threaded executor runs each one
    inside ``spin_once``, so it has none in flight once its thread is joined)."""
    deadline = time.monotonic() + timeout_s
    for task in list(getattr(executor, "_futures", ())):
        while not task.done() and time.monotonic() < deadline:
            time.sleep(0.01)
