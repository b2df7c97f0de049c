"""Watching another node's liveliness through its latched state topic.

The dialogue and speech nodes publish their state with a liveliness lease
(:data:`~omniflow.ros.qos.LEASED_STATE`): DDS asserts it for them, so a reader that requests a
lease (:data:`~omniflow.ros.qos.LIVELINESS_WATCH`) learns within the lease that the publisher
died (``kill -9``, a crash) or is cut off by the network, and when it (or its respawned
process) is back. The watch is a second, watch-only reader: the state itself is read through a
reader that requests no lease, so publishers that offer none (a test, a bag) are still heard.
"""

from __future__ import annotations

from collections.abc import Callable

from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node

from omniflow.ros.qos import LIVELINESS_WATCH


class LivelinessWatch:
    """Calls ``on_change(alive)`` when the publishers of ``topic`` that offer a lease go from
    none alive to some (``True``) or back (``False``); ``alive`` is the current view and
    ``losses`` counts the ``False`` transitions."""

    def __init__(
        self,
        node: Node,
        msg_type: type,
        topic: str,
        on_change: Callable[[bool], None],
        callback_group=None,
    ) -> None:
        self.alive = False
        self.losses = 0
        self._on_change = on_change
        node.create_subscription(
            msg_type,
            topic,
            lambda msg: None,
            LIVELINESS_WATCH,
            callback_group=callback_group,
            event_callbacks=SubscriptionEventCallbacks(
                liveliness=self._on_liveliness, incompatible_qos=lambda info: None
            ),
        )

    def _on_liveliness(self, info) -> None:
        alive = info.alive_count > 0
        if alive == self.alive:
            return
        self.alive = alive
        if not alive:
            self.losses += 1
        self._on_change(alive)
