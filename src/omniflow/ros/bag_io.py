"""Record topics into a bag and play a bag back, over real DDS (the ROS side of ``bag.py``).

Both move raw CDR bytes: the recorder subscribes with ``raw=True`` and writes what arrives,
the player publishes the recorded bytes, so no message is decoded on the way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rclpy.node import Node
from rclpy.qos import QoSProfile

from omniflow.bag import BagMessage, BagReader, BagWriter, known_type, message_class
from omniflow.core.timing import NS_PER_S
from omniflow.errors import BagError
from omniflow.graph import (
    CLOCK_TOPIC,
    EVENTS,
    KEPT_EVENTS,
    LATCHED,
    SENSOR_DATA,
    TOPICS,
    graph_topic_name,
)
from omniflow.ros import qos as qos_profiles

_QOS = {
    SENSOR_DATA: qos_profiles.SENSOR_DATA,
    LATCHED: qos_profiles.LATCHED,
    EVENTS: qos_profiles.EVENTS,
    KEPT_EVENTS: qos_profiles.RESPONSE,
}
# Recorded topics keep a deeper queue than a live consumer: the writer may pause, and a burst
# of state changes (USER_SPEAKING, THINKING, SPEAKING within a few ms) is every one recorded,
# not folded into the last as a depth-1 latched reader does.
_RECORD_DEPTH = 100
# How often the recorder looks for topics that appeared since it started (s).
_DISCOVERY_PERIOD_S = 0.5


def qos_for(relative_name: str, *, recording: bool = False) -> QoSProfile:
    """The QoS the graph uses on a topic (``omniflow.graph.TOPICS``; events otherwise)."""
    name = graph_topic_name(relative_name)
    kind = next((spec.qos for spec in TOPICS if spec.name == name), EVENTS)
    profile = _QOS[kind]
    if recording:
        profile = QoSProfile(
            history=profile.history,
            depth=max(profile.depth, _RECORD_DEPTH),
            reliability=profile.reliability,
            durability=profile.durability,
        )
    return profile


def _absolute(name: str, namespace: str) -> str:
    """``name`` under ``namespace``, as ROS expands it: ``robot1`` (as a launch file's
    ``namespace:=robot1`` passes it) is ``/robot1``; a name given absolute is kept."""
    if name.startswith("/"):
        return name
    namespace = namespace.strip("/")
    return f"/{namespace}/{name}" if namespace else f"/{name}"


class Recorder:
    """Writes every message of the named topics (relative to ``namespace``) into a bag.

    A write that fails (the disk full) stops the recording: :attr:`failure` then says why, and
    the bag holds what was written before it. Names are relative to ``namespace``
    (``/diagnostics``: absolute). A topic's type is the
    graph's (``omniflow.graph.TOPICS``) or, for topics not in that table
    or typed there as "whatever the publisher says", the type its publishers declare; topics
    with no publisher yet are subscribed as soon as one appears. Timestamps are the receive
    time on the node's clock (sim time under use_sim_time), as ``ros2 bag record`` does.
    In the bag, topics keep the names they have relative to the namespace.
    """

    def __init__(
        self,
        node: Node,
        writer: BagWriter,
        topics: Iterable[str],
        namespace: str = "",
        on_message: Callable[[str, str, int, bytes], None] | None = None,
    ) -> None:
        self._node = node
        self._on_message = on_message
        self._types: dict[str, str] = {}
        self._writer = writer
        self._namespace = namespace
        self._wanted = set(topics)
        self._lock = threading.Lock()
        self._subscriptions: dict[str, object] = {}
        self.skipped: dict[str, str] = {}  # topic -> why it is not recorded
        self.closed = False
        self.failure: BagError | None = None  # why recording stopped on its own (disk full)
        self._discover()
        self._timer = node.create_timer(_DISCOVERY_PERIOD_S, self._discover)

    @property
    def subscribed(self) -> list[str]:
        return sorted(self._subscriptions)

    def _discover(self) -> None:
        graph_types = dict(self._node.get_topic_names_and_types())
        for name in sorted(self._wanted - set(self._subscriptions) - set(self.skipped)):
            full = _absolute(name, self._namespace)
            declared = next((s.msg_type for s in TOPICS if s.name == name), "")
            types = graph_types.get(full, [])
            msgtype = declared or (types[0] if types else "")
            if not msgtype:
                continue  # no publisher yet: look again later
            if not known_type(msgtype):
                self.skipped[name] = f"unknown message type {msgtype}"
                self._node.get_logger().warning(f"not recording {full}: {self.skipped[name]}")
                continue
            self._writer.add_topic(name, msgtype)
            self._types[name] = msgtype
            self._subscriptions[name] = self._node.create_subscription(
                message_class(msgtype),
                full,
                self._callback(name),
                qos_for(name, recording=True),
                raw=True,
            )
            self._node.get_logger().info(f"recording {full} ({msgtype})")

    def _callback(self, name: str) -> Callable[[bytes], None]:
        def on_message(raw: bytes) -> None:
            stamp = self._node.get_clock().now().nanoseconds
            with self._lock:
                if self.closed:
                    return
                try:
                    self._writer.write(name, stamp, raw)
                except BagError as err:  # the writer has closed the bag with what it holds
                    self.closed = True
                    self.failure = err
                    return
            if self._on_message is not None:
                self._on_message(name, self._types[name], stamp, raw)

        return on_message

    def close(self) -> dict[str, int]:
        """Stop recording and close the bag: every message received so far is in it, unless
        :attr:`failure` says otherwise."""
        with self._lock:
            self.closed = True
            try:
                self._writer.close()
            except BagError as err:
                self.failure = self.failure or err
        self._node.destroy_timer(self._timer)
        for subscription in self._subscriptions.values():
            self._node.destroy_subscription(subscription)
        return dict(self._writer.counts)


@dataclass
class PlayStats:
    """What a playback did."""

    published: dict[str, int] = field(default_factory=dict)
    skipped_topics: dict[str, str] = field(default_factory=dict)
    loops: int = 0
    late_ms_max: float = 0.0


class Player:
    """Publishes a bag's messages with their original timing (divided by ``rate``).

    ``clock``: also publish ``/clock`` (rosgraph_msgs/Clock) from the bag's timeline before
    each message, and every ``clock_period_s`` when no message came for that long (40 Hz,
    as ``ros2 bag play --clock``), for nodes with use_sim_time. Each /clock message costs
    every such node an executor wake-up: at 100 Hz on top of one per message, the bundled
    session's replay through the graph spent a fifth more CPU (31 against 24 core-seconds),
    which Whisper's final decode waited for. Before the first
    message it waits (up to ``wait_s``) until every topic it publishes has a subscriber, so
    nothing is lost to discovery. Topics of unknown types are skipped and reported.
    """

    def __init__(
        self,
        node: Node,
        reader: BagReader,
        *,
        topics: Iterable[str] | None = None,
        namespace: str = "",
        rate: float = 1.0,
        clock: bool = False,
        clock_period_s: float = 0.025,
        remap: Mapping[str, str] | None = None,
    ) -> None:
        if not rate > 0:
            raise BagError(f"rate must be positive, got {rate}")
        from rosgraph_msgs.msg import Clock

        self._node = node
        self._reader = reader
        self._rate = rate
        self._clock_period_s = clock_period_s
        self._clock_wall_ns = 0  # when /clock was last published (monotonic)
        self.stats = PlayStats()
        names = list(reader.topics) if topics is None else list(topics)
        reader.require(names)
        unknown = reader.unknown_types()
        self._publishers = {}
        for name in names:
            msgtype = reader.topics[name].msgtype
            if name in unknown:
                self.stats.skipped_topics[name] = f"unknown message type {msgtype}"
                continue
            try:
                cls = message_class(msgtype)
            except BagError as err:
                self.stats.skipped_topics[name] = str(err)
                continue
            target = (remap or {}).get(name, name)
            self._publishers[name] = node.create_publisher(
                cls, _absolute(target, namespace), qos_for(name)
            )
            self.stats.published[name] = 0
        if not self._publishers:
            raise BagError(
                f"nothing to play from {reader.path}: {self.stats.skipped_topics or 'no topics'}"
            )
        self._clock_pub = node.create_publisher(Clock, CLOCK_TOPIC, 10) if clock else None
        self._clock_cls = Clock

    @property
    def topics(self) -> list[str]:
        return sorted(self._publishers)

    def wait_for_subscribers(
        self, timeout_s: float, topics: Iterable[str] | None = None
    ) -> list[str]:
        """Wait until the topics have a subscriber; returns those still without one."""
        names = list(self._publishers) if topics is None else list(topics)
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [n for n in names if self._publishers[n].get_subscription_count() == 0]
            if not waiting or time.monotonic() > deadline:
                return waiting
            time.sleep(0.05)

    def _publish_clock(self, stamp_ns: int) -> None:
        if self._clock_pub is not None:
            sec, nanosec = divmod(int(stamp_ns), NS_PER_S)
            msg = self._clock_cls()
            msg.clock.sec, msg.clock.nanosec = sec, nanosec
            self._clock_pub.publish(msg)
            self._clock_wall_ns = time.monotonic_ns()

    def play(
        self,
        *,
        loop: bool = False,
        stop: threading.Event | None = None,
        progress: Callable[[int, int], None] | None = None,
        tail_s: float = 0.0,
        preroll_s: float = 0.0,
        until: Callable[[], bool] | None = None,
        until_max_s: float = 0.0,
    ) -> PlayStats:
        """Play once (or until ``stop`` when looping); ``progress(done_ns, total_ns)`` is called
        about every second. ``preroll_s``: publish /clock at the first message's time this long
        (wall) before playing, so nodes on sim time have a clock when the first message comes;
        ``tail_s``: keep /clock running this long after the last message (bag time), so nodes
        finish what the end of the bag started; then, with ``until``, keep it running until
        ``until()`` is true (checked every clock period), at most ``until_max_s`` more (wall),
        e.g. until the dialogue has finished its last answer."""
        stop = stop or threading.Event()
        topics = list(self._publishers)
        first = last = None
        for message in self._reader.messages(topics):
            first = message.timestamp_ns if first is None else first
            last = message.timestamp_ns
        if first is None:
            raise BagError(f"{self._reader.path} has no messages on {', '.join(topics)}")
        offset_ns = 0  # added per loop so the clock never goes back
        if preroll_s > 0 and self._clock_pub is not None:
            deadline = time.monotonic() + preroll_s
            while time.monotonic() < deadline and not stop.is_set():
                self._publish_clock(first)
                stop.wait(self._clock_period_s)
        while not stop.is_set():
            self._play_once(first, last, offset_ns, stop, progress)
            if not loop:
                break
            self.stats.loops += 1
            offset_ns += last - first + 40_000_000
        end_ns = last + offset_ns + int(tail_s * NS_PER_S)
        if tail_s > 0 and not stop.is_set():
            self._run_clock(last + offset_ns, end_ns, stop)
        if until is not None and not stop.is_set():
            self._run_clock(end_ns, end_ns + int(until_max_s * self._rate * NS_PER_S), stop, until)
        return self.stats

    def _play_once(
        self,
        first: int,
        last: int,
        offset_ns: int,
        stop: threading.Event,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        start_wall = time.monotonic_ns()
        next_progress = 0.0
        self._publish_clock(first + offset_ns)
        for message in self._reader.messages(self._publishers):
            if stop.is_set():
                return
            self._wait_until(message.timestamp_ns, first, offset_ns, start_wall, stop)
            self._publish(message, offset_ns)
            if progress is not None and time.monotonic() >= next_progress:
                next_progress = time.monotonic() + 1.0
                progress(message.timestamp_ns - first, last - first)
        if progress is not None:
            progress(last - first, last - first)

    def _wait_until(
        self, stamp_ns: int, first: int, offset_ns: int, start_wall: int, stop: threading.Event
    ) -> None:
        due_wall = start_wall + (stamp_ns - first) / self._rate
        while True:
            now = time.monotonic_ns()
            remaining_s = (due_wall - now) / NS_PER_S
            if remaining_s <= 0:
                self.stats.late_ms_max = max(self.stats.late_ms_max, -remaining_s * 1000)
                return
            if self._clock_pub is not None:
                due_clock_s = self._clock_period_s - (now - self._clock_wall_ns) / NS_PER_S
                if due_clock_s <= 0:
                    self._publish_clock(first + offset_ns + int((now - start_wall) * self._rate))
                    due_clock_s = self._clock_period_s
                stop.wait(min(remaining_s, due_clock_s))
            else:
                stop.wait(remaining_s)
            if stop.is_set():
                return

    def _publish(self, message: BagMessage, offset_ns: int) -> None:
        self._publish_clock(message.timestamp_ns + offset_ns)
        self._publishers[message.topic].publish(message.raw)
        self.stats.published[message.topic] += 1

    def _run_clock(
        self,
        begin_ns: int,
        end_ns: int,
        stop: threading.Event,
        until: Callable[[], bool] | None = None,
    ) -> None:
        start_wall = time.monotonic_ns()
        while not stop.is_set():
            stamp = begin_ns + int((time.monotonic_ns() - start_wall) * self._rate)
            if stamp >= end_ns or (until is not None and until()):
                return
            if self._clock_pub is None:
                stop.wait(self._clock_period_s)
                continue
            self._publish_clock(stamp)
            stop.wait(self._clock_period_s)
