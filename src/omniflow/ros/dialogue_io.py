"""The dialogue node's outputs, and its messages built from (and read into) plain values."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_srvs.srv import Trigger

from omniflow.core import image_codec
from omniflow.core.dialogue import StateChanged, UserSaid
from omniflow.core.params import ParamSpec
from omniflow.core.turn_context import TurnContext
from omniflow.errors import ImageFormatError
from omniflow.msg import (
    Association,
    DialogueState,
    PowerState,
    ResponseChunk,
    Scene,
    Transcript,
)
from omniflow.ros import conversions
from omniflow.ros.qos import EVENTS, LEASED_STATE, RESPONSE, SENSOR_DATA, STATE_CHANGES

__all__ = [
    "SPEECH_NODE",
    "ContextInputs",
    "DialogueOutputs",
    "chosen_tokens",
    "frame_rgb",
    "transcript_of",
    "user_said",
]

SPEECH_NODE = ParamSpec(
    "speech_node",
    "speech",
    "The speech node (name, relative to this node's "
    "namespace) whose ~/stop service silences playback on cancel",
    read_only=True,
)


def transcript_of(text: str, stamp_ns: int) -> Transcript:
    """A final transcript of text that was not spoken (a goal's prompt), stamped now."""
    stamp = conversions.time_from_ns(stamp_ns)
    return Transcript(
        header=conversions.header(stamp_ns, ""),
        text=text,
        start=stamp,
        end=stamp,
        confidence=float("nan"),
        is_final=True,
    )


def user_said(said: UserSaid, final: Transcript | None, stamp_ns: int) -> Transcript:
    """The ``user_said`` event: the utterance's final transcript (its times, confidence and
    words) with the text the turn used (carried-over words included)."""
    if final is None:
        msg = transcript_of(said.text, stamp_ns)
        msg.utterance_id = said.utterance_id
        return msg
    return Transcript(
        header=final.header,
        utterance_id=final.utterance_id,
        start=final.start,
        end=final.end,
        text=said.text,
        confidence=final.confidence,
        is_final=True,
        words=final.words,
    )


def chosen_tokens(msg: Association) -> tuple[int, list[tuple[int, str]], int]:
    """The association's trigger stamp, (stamp, summary) of each token it chose, and its
    utterance id (0: none)."""
    return (
        conversions.ns_from_time(msg.trigger.stamp),
        [(conversions.ns_from_time(c.stamp), c.summary) for c in msg.candidates if c.chosen],
        int(msg.utterance_id),
    )


def frame_rgb(msg: Image, warn: Callable[[str], None]) -> np.ndarray | None:
    """An RGB array of a frame the turn chose; None (with a warning) when it does not decode."""
    try:
        return image_codec.convert(conversions.image_pixels(msg), msg.encoding, "rgb8")
    except ImageFormatError as err:
        warn(f"a chosen frame was not used: {err}")
        return None


class ContextInputs:
    """The subscriptions that only add to the turn context, under the node's lock: what the
    camera saw (``associations``, ``scene``), the power facts (``power_state``), and the
    frames themselves (``image_raw``) while a model that sees images is loaded."""

    def __init__(self, node: Node, turns: TurnContext, lock, group: CallbackGroup) -> None:
        self._node, self._turns, self._lock, self._group = node, turns, lock, group
        self._frames = None

    def subscribe_camera(self) -> None:
        self._subscribe(Association, "associations", self._on_association, EVENTS)
        self._subscribe(Scene, "scene", self._on_scene, EVENTS)

    def subscribe_power(self) -> None:
        self._subscribe(PowerState, "power_state", self._on_power, STATE_CHANGES)

    def take_frames(self, on: bool) -> None:
        """Subscribe to the frames (each costs a copy: only for a model that sees) or stop."""
        if on and self._frames is None:
            self._frames = self._subscribe(Image, "image_raw", self._on_image, SENSOR_DATA)
        elif not on and self._frames is not None:
            self._node.destroy_subscription(self._frames)
            self._frames = None

    @property
    def frames(self) -> bool:
        return self._frames is not None

    def _subscribe(self, msg_type, topic: str, callback, qos):
        return self._node.create_subscription(
            msg_type, topic, callback, qos, callback_group=self._group
        )

    def _on_association(self, msg: Association) -> None:
        with self._lock:
            self._turns.add_association(*chosen_tokens(msg))

    def _on_scene(self, msg: Scene) -> None:
        stamp_ns = conversions.ns_from_time(msg.header.stamp)
        with self._lock:
            self._turns.add_scene(stamp_ns, msg.description, msg.person_present)

    def _on_image(self, msg: Image) -> None:
        with self._lock:
            self._turns.add_frame(conversions.ns_from_time(msg.header.stamp), msg)

    def _on_power(self, msg: PowerState) -> None:
        with self._lock:
            self._turns.set_power(msg.battery_percent, msg.temperature_c)


class DialogueOutputs:
    """What the dialogue node publishes (``response``, ``dialogue_state``, ``user_said``) and
    its client of the speech node's ``<speech_node>/stop``; stamps from the node clock."""

    def __init__(self, node: Node, speech_node: str, callback_group: CallbackGroup) -> None:
        self._node = node
        self.chunks = 0  # response chunks published
        self._response = node.create_publisher(ResponseChunk, "response", RESPONSE)
        self._state = node.create_publisher(DialogueState, "dialogue_state", LEASED_STATE)
        self._user_said = node.create_publisher(Transcript, "user_said", EVENTS)
        self._stop = node.create_client(
            Trigger, f"{speech_node}/stop", callback_group=callback_group
        )

    def _now_ns(self) -> int:
        return self._node.get_clock().now().nanoseconds

    def chunk(
        self, turn_id: int, index: int, text: str, final: bool, *, turn_start_ns: int
    ) -> None:
        """One piece of an answer (``final``: the empty piece after the last one)."""
        self.chunks += 1
        self._response.publish(
            ResponseChunk(
                header=conversions.header(self._now_ns(), ""),
                turn_id=turn_id,
                index=index,
                text_delta=text,
                is_final=final,
                turn_start=conversions.time_from_ns(turn_start_ns),
            )
        )

    def state(self, change: StateChanged) -> None:
        self._state.publish(
            DialogueState(
                header=conversions.header(self._now_ns(), ""),
                state=int(change.state),
                turn_id=change.turn_id,
                reason=change.reason,
            )
        )

    def user_said(self, said: UserSaid, final: Transcript | None) -> None:
        self._user_said.publish(user_said(said, final, self._now_ns()))

    def stop_speech(self) -> None:
        """Ask the speech node to stop playing (when its service is there)."""
        if self._stop.service_is_ready():
            self._stop.call_async(Trigger.Request())
