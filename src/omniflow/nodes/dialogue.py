"""Dialogue node: turn-taking, the language model, barge-in, proactive turns, converse goals."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image
from std_msgs.msg import String
from std_srvs.srv import Trigger

from omniflow.action import Converse
from omniflow.core import image_codec
from omniflow.core.dialogue import (
    Busy,
    Cancel,
    DialogueManager,
    StartTurn,
    State,
    StateChanged,
    TurnEnded,
    UserSaid,
    Warm,
    complete_sentences,
)
from omniflow.core.params import ParamSpec
from omniflow.core.proactive import ProactivePolicy
from omniflow.core.prompt import Prompt, Turn
from omniflow.engines.llm import LLM_PARAMS, LlmBackend, make_backend
from omniflow.errors import ConfigError, EngineError, ImageFormatError
from omniflow.msg import (
    Association,
    DialogueState,
    PowerState,
    ResponseChunk,
    Scene,
    SpeechState,
    Transcript,
    VoiceActivity,
)
from omniflow.ros import conversions
from omniflow.ros.params import declare_parameters, parameter_values
from omniflow.ros.qos import EVENTS, LATCHED, SENSOR_DATA
from omniflow.ros.run import run_node

_NS_PER_S = 1_000_000_000
_MS = 1_000_000

PARAMS = (
    *LLM_PARAMS,
    ParamSpec("barge_in.enabled", True, "User speech may interrupt the robot while it speaks",
              live=True),
    ParamSpec("barge_in.min_speech_ms", 60, "User speech at least this long interrupts the "
              "robot (the fusion node's VAD confirms speech after its vad.min_speech_ms, 60 by "
              "default, with the robot's own voice removed: then the start itself interrupts)",
              unit="ms", minimum=0, maximum=2000, live=True),
    ParamSpec("speech_start_timeout_s", 3.0, "A complete answer that the speech node has not "
              "started playing after this long ends the turn (no speech node, or a muted one)",
              unit="s", minimum=0.5, maximum=60.0, live=True),
    ParamSpec("history.max_turns", 16, "Earlier turns (user and robot each count one) kept "
              "for the model; older ones are forgotten (the context trims further when full)",
              minimum=0, maximum=256, live=True),
    ParamSpec("vision.enabled", True, "Describe what the camera saw (the frames the "
              "association chose, else the newest scene) to the model on spoken turns",
              live=True),
    ParamSpec("vision.max_age_ms", 3000, "The newest scene is used only when younger than "
              "this", unit="ms", minimum=0, maximum=60000, live=True),
    ParamSpec("proactive.enabled", True, "Let the robot speak unprompted when a rule holds",
              live=True),
    ParamSpec("proactive.rate_hz", 1.0, "How often the proactive rules are checked",
              unit="Hz", minimum=0.1, maximum=10.0, read_only=True),
    ParamSpec("proactive.min_interval_s", 30.0, "At least this long between proactive turns "
              "(and between two firings of one rule)", unit="s", minimum=0.0,
              maximum=86400.0, read_only=True),
    ParamSpec("proactive.rules", "person_appeared => Someone just came into view. Greet them "
              "in one short sentence.", "Proactive rules, one per line: 'CONDITION [and "
              "CONDITION] => INSTRUCTION'; facts: person_present, person_appeared, idle_s, "
              "battery_percent, temperature_c", read_only=True),
    ParamSpec("converse.timeout_s", 60.0, "Converse goals with timeout_s 0 fail after this "
              "long", unit="s", minimum=1.0, maximum=3600.0, live=True),
    ParamSpec("speech_node", "speech", "The speech node (name, relative to this node's "
              "namespace) whose ~/stop service silences playback on cancel", read_only=True),
    ParamSpec("autostart", True, "Configure (load the model) and activate at start-up; false "
              "leaves the transitions to a lifecycle manager (the power manager)",
              read_only=True),
)

# Parameters that need the model reloaded: refused while it is loaded.
_CONFIGURE_PARAMS = frozenset(spec.name for spec in PARAMS
                              if not spec.live and not spec.read_only)
# The newest associations and scenes kept to describe a turn's context.
_ASSOCIATIONS = 32
_SCENES = 64
# An association belongs to an utterance when its trigger is this close to the speech start.
_TRIGGER_MATCH_NS = 200 * _MS
# Camera frames kept for multimodal models (about 3 s at 15 frames/s), and how many of the
# chosen ones go to the model; a frame matches a chosen token within this distance.
_FRAMES = 48
_MAX_IMAGES = 2
_FRAME_MATCH_NS = 50 * _MS
_TICK_S = 0.05
_JOIN_TIMEOUT_S = 5.0
_THROTTLE_S = 5.0


@dataclass
class DialogueStats:
    """Counters for diagnostics."""

    turns: int = 0
    turns_done: int = 0
    barge_ins: int = 0
    cancelled: int = 0
    failed: int = 0
    proactive: int = 0
    goals_accepted: int = 0
    goals_rejected: int = 0
    chunks: int = 0
    warm_tokens: int = 0
    last_error: str = ""
    last_first_token_ms: float = float("nan")
    last_tokens_per_s: float = float("nan")


@dataclass
class _GoalWait:
    """A converse goal waiting for its turn to end."""

    done: threading.Event = field(default_factory=threading.Event)
    turn_id: int = 0
    outcome: str = ""
    reason: str = ""
    response: str = ""
    transcript: Transcript | None = None
    goal_handle: object = None


@dataclass
class _Job:
    turn_id: int
    prompt: Prompt
    cancel: threading.Event
    turn_start_ns: int


class DialogueNode(LifecycleNode):
    """Runs the conversation: listens to the fusion node, asks the model, streams the answer.

    ROS contract:
        node name: ``dialogue`` (lifecycle; autostarts unless ``autostart:=false``). The model
        is loaded on configure and freed on cleanup (the power manager sleeps it that way);
        turns are taken only while active.
        subscribes:
            ``voice_activity`` (omniflow/msg/VoiceActivity, reliable): the user's speech,
            echo removed; START/ONGOING long enough while speaking is a barge-in.
            ``transcript`` (omniflow/msg/Transcript, reliable): partials are fed to the model
            ahead; the final one ends the user's turn.
            ``associations`` (omniflow/msg/Association) and ``scene`` (omniflow/msg/Scene):
            what the camera saw, described to the model.
            ``speech_state`` (omniflow/msg/SpeechState, latched): when playback ends.
            ``image_raw`` (sensor_msgs/Image, sensor-data QoS), only with a model that sees
            images (``minicpmv``, or ``remote`` with ``llm.remote.images``): the frames the
            association chose go to the model.
            ``power_state`` (omniflow/msg/PowerState, latched): facts for proactive rules.
        publishes:
            ``response`` (omniflow/msg/ResponseChunk, reliable, keep last 50): the answer as it
            decodes, one chunk per piece, then an empty ``is_final`` chunk (not for a
            cancelled turn).
            ``dialogue_state`` (omniflow/msg/DialogueState, latched): every state change with
            its reason; INTERRUPTED stops the speech node.
            ``user_said`` (omniflow/msg/Transcript, reliable): each utterance that starts a
            turn, for behaviour trees that react to speech.
            ``~/status`` (std_msgs/String, latched JSON) and ``/diagnostics`` (1 Hz).
        actions:
            ``converse`` (omniflow/action/Converse): answer a prompt, or the next utterance;
            feedback streams the answer; cancel stops generation and speech; a goal while busy
            is rejected unless ``preempt`` is set.
        calls: ``<speech_node>/stop`` (std_srvs/Trigger) when a turn is cancelled.
        parameters: see ``PARAMS`` (the ``llm.*`` ones apply on configure).

    Threads: subscriptions and timers share one mutually exclusive group; goals run in a
    reentrant group and wait on events; the model decodes on its own worker thread, so a
    barge-in is handled while a token is being decoded and cancels it between tokens (or
    between prompt chunks).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("dialogue", **kwargs)
        declare_parameters(self, PARAMS, apply=self._apply_params)
        self.params = parameter_values(self, PARAMS)
        self.stats = DialogueStats()
        self._lock = threading.RLock()  # the manager, turns, goals, history
        self._manager = self._make_manager()
        self._policy = ProactivePolicy(self.params["proactive.rules"].splitlines(),
                                       min_interval_s=self.params["proactive.min_interval_s"])
        self._backend: LlmBackend | None = None
        self._active = False
        self._state_text = "unconfigured"
        self._history: deque[Turn] = deque()
        self._user_texts: dict[int, str] = {}
        self._cancels: dict[int, threading.Event] = {}
        self._goals: dict[int, _GoalWait] = {}       # turn id -> goal
        self._listeners: list[_GoalWait] = []        # MODE_LISTEN goals waiting for a turn
        self._finals: dict[int, Transcript] = {}     # utterance id -> final transcript
        self._utterance_start: dict[int, int] = {}   # utterance id -> start stamp (ns)
        self._associations: deque[Association] = deque(maxlen=_ASSOCIATIONS)
        self._scenes: deque[Scene] = deque(maxlen=_SCENES)
        self._frames: deque[tuple[int, Image]] = deque(maxlen=_FRAMES)
        self._image_sub = None
        self._power: PowerState | None = None
        self._last_turn_end = time.monotonic()
        self._jobs: deque[_Job] = deque()
        self._warm_text: str | None = None
        self._warm_cancel = threading.Event()
        self._work = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

        inputs = self._inputs = MutuallyExclusiveCallbackGroup()
        self._response_pub = self.create_publisher(ResponseChunk, "response", EVENTS)
        self._state_pub = self.create_publisher(DialogueState, "dialogue_state", LATCHED)
        self._user_said_pub = self.create_publisher(Transcript, "user_said", EVENTS)
        self._status_pub = self.create_publisher(String, "~/status", LATCHED)
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(VoiceActivity, "voice_activity", self._on_voice, EVENTS,
                                 callback_group=inputs)
        self.create_subscription(Transcript, "transcript", self._on_transcript, EVENTS,
                                 callback_group=inputs)
        self.create_subscription(Association, "associations", self._on_association, EVENTS,
                                 callback_group=inputs)
        self.create_subscription(Scene, "scene", self._on_scene, EVENTS, callback_group=inputs)
        self.create_subscription(SpeechState, "speech_state", self._on_speech, LATCHED,
                                 callback_group=inputs)
        self.create_subscription(PowerState, "power_state", self._on_power, LATCHED,
                                 callback_group=inputs)
        self._stop_client = self.create_client(
            Trigger, f"{self.params['speech_node']}/stop", callback_group=inputs)
        self.create_timer(_TICK_S, self._on_tick, callback_group=inputs)
        self.create_timer(1.0 / self.params["proactive.rate_hz"], self._on_proactive,
                          callback_group=inputs)
        self.create_timer(1.0, self._publish_diagnostics, callback_group=inputs)
        self._action = ActionServer(
            self, Converse, "converse", execute_callback=self._execute,
            goal_callback=self._on_goal, cancel_callback=lambda _: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup())
        self._publish_state(StateChanged(State.LISTENING, 0, "not active yet"))
        self._publish_status()

    # ----------------------------------------------------------------- helpers
    def now_ns(self) -> int:
        """The node clock (sim time under use_sim_time) in nanoseconds."""
        return self.get_clock().now().nanoseconds

    def _now(self) -> float:
        return self.now_ns() / _NS_PER_S

    def _make_manager(self) -> DialogueManager:
        p = self.params
        return DialogueManager(barge_in=p["barge_in.enabled"],
                               barge_in_min_speech_s=p["barge_in.min_speech_ms"] / 1000,
                               speech_start_timeout_s=p["speech_start_timeout_s"])

    def _apply_params(self, changes: dict[str, object]) -> str | None:
        fixed = [name for name in changes if name in _CONFIGURE_PARAMS]
        if fixed and self._backend is not None:
            return (f"{', '.join(fixed)} apply on configure: deactivate and clean up the node "
                    "first (the model is loaded)")
        live_llm = {name: value for name, value in changes.items() if name.startswith("llm.")}
        if live_llm and self._backend is not None:
            try:
                self._backend.update(live_llm)  # threads, sampling: from the next token
            except (ConfigError, EngineError) as err:
                return str(err)
        with self._lock:
            self.params.update(changes)
            m = self._manager
            m.barge_in = self.params["barge_in.enabled"]
            m.barge_in_min_speech_s = self.params["barge_in.min_speech_ms"] / 1000
            m.speech_start_timeout_s = self.params["speech_start_timeout_s"]
        return None

    # ----------------------------------------------------------------- lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            backend = make_backend({n: self.params[n] for n in self.params if n.startswith("llm.")})
            started = time.monotonic()
            backend.load()
        except (ConfigError, EngineError) as err:
            self.get_logger().error(f"cannot configure: {err}")
            self.stats.last_error = str(err)
            self._state_text = f"not configured: {err}"
            self._publish_status()
            return TransitionCallbackReturn.FAILURE
        self._backend = backend
        if self._wants_images():  # frames cost a copy each: only for a model that sees them
            self._image_sub = self.create_subscription(
                Image, "image_raw", self._on_image, SENSOR_DATA, callback_group=self._inputs)
        self._state_text = "configured"
        self.get_logger().info(f"model loaded ({backend.name}) in "
                               f"{time.monotonic() - started:.1f} s")
        self._publish_status()
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop.clear()
        self._worker = threading.Thread(target=self._run_model, name="dialogue-model",
                                        daemon=True)
        self._worker.start()
        with self._lock:
            self._active = True
            self._manager = self._make_manager()
            self._publish_state(StateChanged(State.LISTENING, self._manager.turn_id,
                                             "listening"))
        self._state_text = "active"
        self._publish_status()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self._apply(self._manager.cancel("the dialogue node was deactivated", self._now()))
            self._active = False
            for goal in [*self._goals.values(), *self._listeners]:
                goal.outcome, goal.reason = "cancelled", "the dialogue node was deactivated"
                goal.done.set()
            self._goals.clear()
            self._listeners.clear()
        self._stop_worker()
        self._state_text = "inactive"
        self._publish_status()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def release(self) -> None:
        """Stop decoding and free the model; safe in any state. The history is kept."""
        with self._lock:
            self._active = False
            for cancel in self._cancels.values():
                cancel.set()
        self._stop_worker()
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()
        if self._image_sub is not None:
            self.destroy_subscription(self._image_sub)
            self._image_sub = None
        with self._lock:
            self._frames.clear()
        self._state_text = "unconfigured"

    def _stop_worker(self) -> None:
        self._stop.set()
        self._warm_cancel.set()
        with self._work:
            for cancel in self._cancels.values():
                cancel.set()
            self._work.notify_all()
        if self._worker is not None:
            self._worker.join(_JOIN_TIMEOUT_S)
            if self._worker.is_alive():
                self.get_logger().error(f"model thread did not stop within {_JOIN_TIMEOUT_S} s")
            self._worker = None

    # ----------------------------------------------------------------- inputs
    def _on_voice(self, msg: VoiceActivity) -> None:
        stamp_ns = conversions.ns_from_time(msg.header.stamp)
        with self._lock:
            if not self._active:
                return
            now = self._now()
            if msg.event == VoiceActivity.START:
                self._utterance_start[msg.utterance_id] = conversions.ns_from_time(msg.start)
                self._trim(self._utterance_start)
                actions = self._manager.voice_start(msg.utterance_id, msg.speech_s, now)
            elif msg.event == VoiceActivity.ONGOING:
                actions = self._manager.voice_ongoing(msg.utterance_id, msg.speech_s, now)
            elif msg.event == VoiceActivity.END:
                actions = self._manager.voice_end(msg.utterance_id, now)
            else:
                self.get_logger().warning(f"voice_activity with unknown event {msg.event} "
                                          f"(stamp {stamp_ns}) ignored",
                                          throttle_duration_sec=_THROTTLE_S)
                return
            self._apply(actions)

    def _on_transcript(self, msg: Transcript) -> None:
        with self._lock:
            if not self._active:
                return
            if msg.is_final:
                self._finals[msg.utterance_id] = msg
                self._trim(self._finals)
            self._apply(self._manager.transcript(msg.utterance_id, msg.text, msg.is_final,
                                                 self._now()))

    def _on_association(self, msg: Association) -> None:
        with self._lock:
            self._associations.append(msg)

    def _on_scene(self, msg: Scene) -> None:
        with self._lock:
            self._scenes.append(msg)
            self._policy.observe_person(msg.person_present)

    def _on_image(self, msg: Image) -> None:
        with self._lock:
            self._frames.append((conversions.ns_from_time(msg.header.stamp), msg))

    def _wants_images(self) -> bool:
        p = self.params
        return p["llm.backend"] == "minicpmv" or \
            (p["llm.backend"] == "remote" and p["llm.remote.images"])

    def _on_speech(self, msg: SpeechState) -> None:
        with self._lock:
            if self._active:
                self._apply(self._manager.speech(msg.speaking, msg.turn_id, self._now()))

    def _on_power(self, msg: PowerState) -> None:
        with self._lock:
            self._power = msg

    def _on_tick(self) -> None:
        with self._lock:
            if self._active:
                self._apply(self._manager.tick(self._now()))

    def _on_proactive(self) -> None:
        with self._lock:
            if not self._active or not self.params["proactive.enabled"]:
                return
            power = self._power
            busy = self._manager.busy or self._goals or self._listeners
            rule = self._policy.check(
                time.monotonic(), listening=not busy,
                idle_s=time.monotonic() - self._last_turn_end,
                battery_percent=power.battery_percent if power else float("nan"),
                temperature_c=power.temperature_c if power else float("nan"))
            if rule is None:
                return
            self.stats.proactive += 1
            self.get_logger().info(f"proactive rule fired: {rule.text}")
            self._apply(self._manager.prompt(f"({rule.instruction})", "proactive",
                                             self._now()))

    # ----------------------------------------------------------------- actions
    def _apply(self, actions) -> None:
        """Carry out the manager's actions in order (the lock is held)."""
        for action in actions:
            if isinstance(action, StateChanged):
                self._publish_state(action)
            elif isinstance(action, StartTurn):
                self._start_turn(action)
            elif isinstance(action, Cancel):
                self._cancel(action)
            elif isinstance(action, Warm):
                self._warm_text = action.user_text
                self._work.notify_all()
            elif isinstance(action, UserSaid):
                self._publish_user_said(action)
            elif isinstance(action, TurnEnded):
                self._turn_ended(action)

    def _start_turn(self, start: StartTurn) -> None:
        self.stats.turns += 1
        self._warm_cancel.set()
        self._warm_text = None
        self._user_texts[start.turn_id] = start.user_text
        final = self._finals.get(start.utterance_id)
        turn_start_ns = conversions.ns_from_time(final.end) if final else self.now_ns()
        use_vision = self.params["vision.enabled"]
        if start.source == "speech":
            for waiter in self._listeners:
                waiter.turn_id = start.turn_id
                waiter.transcript = final or self._transcript_of(start.user_text)
                self._goals[start.turn_id] = waiter
            self._listeners.clear()
        goal = self._goals.get(start.turn_id)
        if goal is not None and goal.goal_handle is not None:
            use_vision = goal.goal_handle.request.use_vision
        scene, stamps = self._scene(start.utterance_id) if use_vision else ("", [])
        images = self._images(stamps) if use_vision and self._image_sub is not None else ()
        prompt = Prompt(system=self.params["llm.system_prompt"], scene=scene,
                        history=tuple(self._history), user=start.user_text, images=images)
        cancel = threading.Event()
        self._cancels[start.turn_id] = cancel
        self._jobs.append(_Job(start.turn_id, prompt, cancel, turn_start_ns))
        self._work.notify_all()

    def _cancel(self, cancel: Cancel) -> None:
        event = self._cancels.get(cancel.turn_id)
        if event is not None:
            event.set()
        if "barge-in" in cancel.reason:
            self.stats.barge_ins += 1
        if cancel.stop_speech and self._stop_client.service_is_ready():
            self._stop_client.call_async(Trigger.Request())

    def _turn_ended(self, ended: TurnEnded) -> None:
        self._last_turn_end = time.monotonic()
        self._cancels.pop(ended.turn_id, None)
        user = self._user_texts.pop(ended.turn_id, "")
        counters = {"done": "turns_done", "cancelled": "cancelled", "interrupted": "cancelled",
                    "failed": "failed"}
        if ended.outcome in counters:
            setattr(self.stats, counters[ended.outcome],
                    getattr(self.stats, counters[ended.outcome]) + 1)
        if ended.outcome == "failed":
            self.stats.last_error = ended.reason
            self.get_logger().error(f"turn {ended.turn_id} failed: {ended.reason}")
        # The history keeps what was said, even when the answer failed or was cut short (then
        # only its finished sentences: a fragment would be imitated).
        robot = ended.response.strip()
        if ended.outcome in ("interrupted", "cancelled"):
            robot = complete_sentences(robot)
        if user:
            self._history.append(Turn("user", user))
        if robot:
            self._history.append(Turn("robot", robot))
        while len(self._history) > self.params["history.max_turns"]:
            self._history.popleft()
        goal = self._goals.pop(ended.turn_id, None)
        if goal is not None:
            goal.outcome, goal.reason, goal.response = ended.outcome, ended.reason, \
                ended.response
            goal.done.set()

    # ----------------------------------------------------------------- context
    def _scene(self, utterance_id: int) -> tuple[str, list[int]]:
        """Words for what the camera saw and the stamps of the frames meant: the vision
        tokens the association chose for this utterance, else the newest scene when it is
        recent enough."""
        start_ns = self._utterance_start.get(utterance_id)
        if start_ns is not None:
            best = min(self._associations, default=None, key=lambda a: abs(
                conversions.ns_from_time(a.trigger.stamp) - start_ns))
            if best is not None and abs(conversions.ns_from_time(best.trigger.stamp)
                                        - start_ns) <= _TRIGGER_MATCH_NS:
                chosen = [c for c in best.candidates if c.chosen]
                if chosen:
                    text = "; ".join(dict.fromkeys(c.summary for c in chosen if c.summary))
                    return text, [conversions.ns_from_time(c.stamp) for c in chosen]
        if self._scenes:
            newest = self._scenes[-1]
            stamp_ns = conversions.ns_from_time(newest.header.stamp)
            if self.now_ns() - stamp_ns <= self.params["vision.max_age_ms"] * _MS:
                return newest.description, [stamp_ns]
        return "", []

    def _images(self, stamps: list[int]) -> tuple:
        """RGB frames nearest the chosen stamps (at most ``_MAX_IMAGES``); a frame that does
        not decode is skipped with a warning."""
        images = []
        for stamp_ns in stamps[:_MAX_IMAGES]:
            near = min(self._frames, default=None, key=lambda f: abs(f[0] - stamp_ns))
            if near is None or abs(near[0] - stamp_ns) > _FRAME_MATCH_NS:
                continue
            msg = near[1]
            try:
                images.append(image_codec.convert(conversions.image_pixels(msg), msg.encoding,
                                                  "rgb8"))
            except ImageFormatError as err:
                self.get_logger().warning(f"a chosen frame was not used: {err}",
                                          throttle_duration_sec=_THROTTLE_S)
        return tuple(images)

    def _transcript_of(self, text: str) -> Transcript:
        stamp = conversions.time_from_ns(self.now_ns())
        return Transcript(header=conversions.header(self.now_ns(), ""), text=text,
                          start=stamp, end=stamp, confidence=float("nan"), is_final=True)

    @staticmethod
    def _trim(table: dict, keep: int = 64) -> None:
        while len(table) > keep:
            del table[next(iter(table))]

    # ----------------------------------------------------------------- the model thread
    def _run_model(self) -> None:
        """Generate queued turns; between turns, evaluate the user's growing words ahead."""
        while not self._stop.is_set():
            with self._work:
                while not self._stop.is_set() and not self._jobs and self._warm_text is None:
                    self._work.wait(0.5)
                if self._stop.is_set():
                    return
                job = self._jobs.popleft() if self._jobs else None
                warm_text, self._warm_text = (None, None) if job else (self._warm_text, None)
                backend = self._backend
                history = tuple(self._history)
                self._warm_cancel.clear()
            if backend is None:
                continue
            if job is not None:
                self._generate(backend, job)
            elif warm_text:
                self._warm(backend, warm_text, history)

    def _warm(self, backend: LlmBackend, text: str, history: tuple[Turn, ...]) -> None:
        prompt = Prompt(system=self.params["llm.system_prompt"], history=history, user=text)
        try:
            evaluated = backend.warm(prompt, self._warm_cancel)
        except EngineError as err:
            self.get_logger().warning(f"evaluating ahead failed: {err}",
                                      throttle_duration_sec=_THROTTLE_S)
            return
        with self._lock:
            self.stats.warm_tokens += evaluated

    def _generate(self, backend: LlmBackend, job: _Job) -> None:
        index = 0
        error = ""
        try:
            for delta in backend.generate(job.prompt, cancel=job.cancel):
                if job.cancel.is_set():
                    break
                with self._lock:
                    if job.cancel.is_set():
                        break
                    self._publish_chunk(job, index, delta, False)
                    index += 1
                    self._apply(self._manager.token(job.turn_id, delta, self._now()))
                    self._feedback(job.turn_id, delta)
        except EngineError as err:
            error = f"the model failed: {err}"
        except Exception as err:  # a backend bug must not take the conversation down
            error = f"the model failed unexpectedly: {type(err).__name__}: {err}"
        stats = backend.last_stats
        with self._lock:
            if stats is not None:
                self.stats.last_first_token_ms = stats.first_token_s * 1000
                if stats.total_s > stats.first_token_s and stats.generated_tokens > 1:
                    self.stats.last_tokens_per_s = (stats.generated_tokens - 1) / \
                        (stats.total_s - stats.first_token_s)
            if job.cancel.is_set():
                return
            if not error:
                self._publish_chunk(job, index, "", True)
            self._apply(self._manager.generated(job.turn_id, self._now(), error))

    # ----------------------------------------------------------------- outputs
    def _publish_chunk(self, job: _Job, index: int, text: str, final: bool) -> None:
        self.stats.chunks += 1
        self._response_pub.publish(ResponseChunk(
            header=conversions.header(self.now_ns(), ""), turn_id=job.turn_id, index=index,
            text_delta=text, is_final=final,
            turn_start=conversions.time_from_ns(job.turn_start_ns)))

    def _publish_state(self, change: StateChanged) -> None:
        self._state_pub.publish(DialogueState(
            header=conversions.header(self.now_ns(), ""), state=int(change.state),
            turn_id=change.turn_id, reason=change.reason))

    def _publish_user_said(self, said: UserSaid) -> None:
        final = self._finals.get(said.utterance_id)
        msg = Transcript() if final is None else Transcript(
            header=final.header, utterance_id=final.utterance_id, start=final.start,
            end=final.end, confidence=final.confidence, is_final=True, words=final.words)
        if final is None:
            msg = self._transcript_of(said.text)
            msg.utterance_id = said.utterance_id
        msg.text = said.text
        self._user_said_pub.publish(msg)

    def _feedback(self, turn_id: int, delta: str) -> None:
        goal = self._goals.get(turn_id)
        if goal is None or goal.goal_handle is None:
            return
        goal.response += delta
        goal.goal_handle.publish_feedback(Converse.Feedback(
            turn_id=turn_id, text_delta=delta, partial_response=goal.response))

    # ----------------------------------------------------------------- the converse action
    def _on_goal(self, request: Converse.Goal) -> GoalResponse:
        with self._lock:
            busy = self._manager.busy or bool(self._goals) or bool(self._listeners)
            if busy and not request.preempt:
                self.stats.goals_rejected += 1
                self.get_logger().warning(
                    f"converse goal rejected: busy ({self._manager.state.name.lower()}); set "
                    "preempt to interrupt the current turn")
                return GoalResponse.REJECT
            self.stats.goals_accepted += 1
            return GoalResponse.ACCEPT

    def _execute(self, goal_handle) -> Converse.Result:
        request = goal_handle.request
        wait = _GoalWait(goal_handle=goal_handle)
        timeout_s = request.timeout_s if request.timeout_s > 0 else \
            self.params["converse.timeout_s"]
        error = self._begin_goal(request, wait)
        if error:
            return self._finish_goal(goal_handle, wait, error)
        deadline = time.monotonic() + timeout_s
        while not wait.done.wait(0.02):
            if goal_handle.is_cancel_requested:
                self._end_goal(wait, "the goal was cancelled")
                wait.done.wait(1.0)
                return self._finish_goal(goal_handle, wait, "cancelled", canceled=True)
            if time.monotonic() > deadline:
                self._end_goal(wait, f"timed out after {timeout_s:g} s")
                wait.done.wait(1.0)
                return self._finish_goal(goal_handle, wait, f"timed out after {timeout_s:g} s")
        if wait.outcome == "done":
            return self._finish_goal(goal_handle, wait, "")
        return self._finish_goal(goal_handle, wait, f"{wait.outcome}: {wait.reason}")

    def _begin_goal(self, request: Converse.Goal, wait: _GoalWait) -> str:
        """Start the goal's turn (or wait for the next utterance); an error text or ''."""
        with self._lock:
            if not self._active:
                return "the dialogue node is not active (model not loaded?)"
            if request.mode == Converse.Goal.MODE_LISTEN:
                if request.preempt:
                    self._apply(self._manager.cancel("preempted by a listen goal", self._now()))
                self._listeners.append(wait)
                return ""
            if request.mode != Converse.Goal.MODE_PROMPT:
                return (f"unknown mode {request.mode}; use MODE_PROMPT "
                        f"({Converse.Goal.MODE_PROMPT}) or MODE_LISTEN "
                        f"({Converse.Goal.MODE_LISTEN})")
            try:
                actions = self._manager.prompt(request.prompt, "goal", self._now(),
                                               preempt=request.preempt)
            except ValueError:
                return "the goal's prompt is empty: give a prompt, or use MODE_LISTEN"
            except Busy as err:
                return f"{err}; set preempt to interrupt it"
            start = next(a for a in actions if isinstance(a, StartTurn))
            wait.turn_id = start.turn_id
            wait.transcript = self._transcript_of(request.prompt)
            self._goals[start.turn_id] = wait
            self._apply(actions)
            return ""

    def _end_goal(self, wait: _GoalWait, reason: str) -> None:
        with self._lock:
            if wait in self._listeners:
                self._listeners.remove(wait)
                wait.outcome, wait.reason = "cancelled", reason
                wait.done.set()
            elif self._manager.active_turn == wait.turn_id and wait.turn_id:
                self._apply(self._manager.cancel(reason, self._now()))
            else:
                self._goals.pop(wait.turn_id, None)
                wait.outcome, wait.reason = "cancelled", reason
                wait.done.set()

    def _finish_goal(self, goal_handle, wait: _GoalWait, error: str, *,
                     canceled: bool = False) -> Converse.Result:
        result = Converse.Result(success=not error, error=error, response=wait.response,
                                 turn_id=wait.turn_id)
        if wait.transcript is not None:
            result.transcript = wait.transcript
        if canceled:
            goal_handle.canceled()
        elif error:
            goal_handle.abort()
        else:
            goal_handle.succeed()
        return result

    # ----------------------------------------------------------------- reporting
    def _summary(self) -> dict[str, object]:
        with self._lock:
            return {"state": self._state_text, "dialogue": self._manager.state.name,
                    "turn_id": self._manager.turn_id,
                    "backend": self._backend.name if self._backend else "",
                    "history_turns": len(self._history),
                    "proactive_rules": len(self._policy.rules), **vars(self.stats)}

    def _publish_status(self) -> None:
        self._status_pub.publish(String(data=json.dumps(self._summary(), sort_keys=True)))

    def _publish_diagnostics(self) -> None:
        values = self._summary()
        level = DiagnosticStatus.OK if self._state_text == "active" else DiagnosticStatus.WARN
        if values["failed"]:
            level = DiagnosticStatus.WARN
        status = DiagnosticStatus(
            level=level, name=f"omniflow: {self.get_fully_qualified_name()}",
            message=self._state_text, hardware_id=values["backend"] or "dialogue",
            values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])
        self._diagnostics.publish(
            DiagnosticArray(header=conversions.header(self.now_ns(), ""), status=[status]))
        self._publish_status()


def main(args: list[str] | None = None) -> int:
    """Run the dialogue node until shutdown (2: bad parameter)."""
    return run_node(DialogueNode, args, executor_factory=lambda: MultiThreadedExecutor(4))


if __name__ == "__main__":
    raise SystemExit(main())
