"""The QoS profiles omniflow uses, in one place.

- sensor streams (audio chunks, images): the sensor-data profile (best effort, keep last 5,
  volatile): a late chunk is worth less than the next one, and a slow subscriber must never
  stall capture;
- latched state (dialogue, speech and power state): reliable, transient local, depth 1, so a
  late subscriber gets the current state at once;
- events and results (transcripts, responses, associations): reliable, keep last 50.
"""

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
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

EVENTS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=50,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
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
