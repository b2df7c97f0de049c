"""The QoS profiles omniflow uses, in one place.

- sensor streams (audio chunks, images): the sensor-data profile (best effort, keep last 5,
  volatile): a late chunk is worth less than the next one, and a slow subscriber must never
  stall capture;
- latched state (dialogue, speech and power state): reliable, transient local, depth 1, so a
  late subscriber gets the current state at once; the dialogue and speech nodes' states also
  assert their liveliness (``LEASED_STATE``), so a node that depends on one of them notices
  within ``LIVELINESS_WATCH`` that it is gone (killed, or cut off by the network), though its
  state rarely changes (:mod:`omniflow.ros.liveliness`); their readers (``STATE_CHANGES``)
  queue up to 50 changes, so a burst (INTERRUPTED then LISTENING) is seen change by change;
- events and results (transcripts, associations): reliable, keep last 50;
- the streamed answer (``RESPONSE``): the same, and its publisher keeps the last 50 chunks
  for readers that join late (transient local), so a speech node that starts, or restarts,
  in the middle of an answer hears it from its first piece (it drops the chunks of turns that
  are over: :class:`omniflow.core.speech_turns.TurnGate`). Readers may ask for volatile (they
  get what comes after they join); a publisher must offer transient local, or the speech
  node, which asks for it, does not match it (rclpy warns of the incompatible QoS).
"""

from rclpy.duration import Duration
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    LivelinessPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

SENSOR_DATA = qos_profile_sensor_data

LATCHED = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

# Requested by a reader that must see every state change, not only the current state (tests,
# benchmarks, a behaviour tree waiting for THINKING): matches the latched publishers, and its
# queue keeps a burst of changes that arrive between two turns of its executor (USER_SPEAKING,
# THINKING and SPEAKING can come within a few ms), which a depth-1 reader folds into the last.
STATE_CHANGES = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=50,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

# Offered by the dialogue and speech nodes' state publishers: DDS asserts it for the node (a
# fraction of the lease). A subscriber that requests no lease (the default) still matches.
LEASED_STATE = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
    liveliness=LivelinessPolicy.AUTOMATIC,
    liveliness_lease_duration=Duration(seconds=1),
)

# Requested by a reader that only watches a node's liveliness: at least the offered
# lease, or the two do not match; 2 s rides out a busy moment. It does not match publishers
# that offer no lease, so the state itself is read through LATCHED.
LIVELINESS_WATCH = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
    liveliness=LivelinessPolicy.AUTOMATIC,
    liveliness_lease_duration=Duration(seconds=2),
)

EVENTS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=50,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

RESPONSE = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=50,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)


def sensor_queue(depth: int) -> QoSProfile:
    """The sensor-data profile with a deeper (or shallower) keep-last queue, for a subscriber
    that must ride out moments when it cannot take messages: the queue depth is the
    subscriber's own, so it matches any sensor-data publisher."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.VOLATILE,
    )
