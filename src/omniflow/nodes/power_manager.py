"""Power manager node: telemetry, a DVFS-like mode policy, and the actions on other nodes."""

from __future__ import annotations

import math
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter

from omniflow.core import telemetry
from omniflow.core.params import ParamSpec
from omniflow.core.power_policy import (
    ActionConfig,
    Decision,
    Mode,
    Plan,
    PolicyConfig,
    PolicyInput,
    PowerPolicy,
    plan,
)
from omniflow.devices import sysfs
from omniflow.errors import ConfigError, RemoteCallError
from omniflow.msg import DialogueState, PowerState, VoiceActivity
from omniflow.ros.conversions import header
from omniflow.ros.params import declare_parameters, parameter_values
from omniflow.ros.qos import LATCHED, SENSOR_DATA
from omniflow.ros.run import run_node

_MODES = ("active", "listen", "idle", "sleep", "thermal")
_MODE_KEYS = dict(zip(_MODES, (Mode.ACTIVE, Mode.LISTEN, Mode.IDLE, Mode.SLEEP,
                               Mode.THERMAL_LIMIT), strict=True))
_FPS_DEFAULTS = {"active": 30.0, "listen": 15.0, "idle": 10.0, "sleep": 2.0, "thermal": 10.0}
_VISION_DEFAULTS = {"active": 5.0, "listen": 2.0, "idle": 1.0, "sleep": 0.5, "thermal": 1.0}

PARAMS = (
    ParamSpec("period_s", 1.0, "Telemetry, policy and actions run once per period", unit="s",
              minimum=0.1, maximum=60.0, read_only=True),
    ParamSpec("sysfs_root", "/", "Filesystem root holding sys/ and proc/ (a fake tree in "
              "tests)", read_only=True),
    ParamSpec("targets.camera", "camera", "Camera node whose 'fps' is set (relative names "
              "resolve in this node's namespace; empty: none)", read_only=True),
    ParamSpec("targets.vision", "fusion", "Node whose 'vision.rate_hz' is set (the vision "
              "encoder; never deactivated: it also hears the speech that wakes the robot; "
              "empty: none)", read_only=True),
    ParamSpec("targets.llm", "dialogue", "Lifecycle node holding the LLM: deactivated and "
              "cleaned up in SLEEP (the model's memory is freed), configured and activated "
              "on waking; its 'llm.threads' is set (empty: none)",
              read_only=True),
    ParamSpec("targets.timeout_s", 2.0, "A parameter or get-state call not answered within "
              "this is abandoned, logged and retried next period", unit="s", minimum=0.1,
              maximum=60.0, live=True),
    ParamSpec("targets.transition_timeout_s", 30.0, "Same for a lifecycle transition (loading "
              "a model on configure can take seconds)", unit="s", minimum=0.5,
              maximum=300.0, live=True),
    ParamSpec("policy.active_hold_s", 10.0, "ACTIVE is kept this long after the dialogue "
              "returns to LISTENING (pauses between turns)", unit="s", minimum=0.0,
              maximum=3600.0, live=True),
    ParamSpec("policy.idle_after_s", 60.0, "IDLE after this long without interaction",
              unit="s", minimum=0.0, maximum=86400.0, live=True),
    ParamSpec("policy.sleep_after_s", 300.0, "SLEEP after this long without interaction",
              unit="s", minimum=0.0, maximum=86400.0, live=True),
    ParamSpec("policy.min_dwell_s", 5.0, "Least time in a mode before moving to a lower-power "
              "one or leaving THERMAL_LIMIT (waking and entering THERMAL_LIMIT are immediate)",
              unit="s", minimum=0.0, maximum=3600.0, live=True),
    ParamSpec("budget.temperature_c", 40.0, "THERMAL_LIMIT at or above this temperature "
              "(hottest zone; phone-class default)", unit="°C", minimum=20.0, maximum=120.0,
              live=True),
    ParamSpec("budget.temperature_hysteresis_c", 3.0, "THERMAL_LIMIT ends only below the "
              "limit minus this", unit="°C", minimum=0.0, maximum=30.0, live=True),
    ParamSpec("budget.sustained_w", 2.0, "THERMAL_LIMIT when the power averaged over "
              "budget.power_window_s exceeds this (phone-class default)", unit="W",
              minimum=0.1, maximum=1000.0, live=True),
    ParamSpec("budget.peak_w", 5.0, "THERMAL_LIMIT when one power reading exceeds this",
              unit="W", minimum=0.1, maximum=1000.0, live=True),
    ParamSpec("budget.power_window_s", 30.0, "Time constant of the sustained power average",
              unit="s", minimum=1.0, maximum=3600.0, live=True),
    ParamSpec("budget.power_hysteresis", 0.1, "THERMAL_LIMIT ends only below each power "
              "budget times (1 - this)", minimum=0.0, maximum=0.9, live=True),
    ParamSpec("budget.power_from_estimate", False, "Let a modelled power estimate (no sensor) "
              "count against the power budgets", live=True),
    ParamSpec("budget.battery_low_percent", 20.0, "Below this, on battery, LISTEN is skipped "
              "and SLEEP comes at policy.idle_after_s", unit="%", minimum=0.0,
              maximum=100.0, live=True),
    ParamSpec("model.idle_w", 0.5, "Power model when no sensor exists: the board at rest "
              "(P = idle + (max - idle) * load * (f/f_max)^2)", unit="W", minimum=0.0,
              maximum=1000.0, live=True),
    ParamSpec("model.max_w", 4.5, "Power model: every core busy at the highest frequency",
              unit="W", minimum=0.0, maximum=1000.0, live=True),
    *(ParamSpec(f"camera.fps_{mode}", value, f"Camera frame rate in {mode.upper()}"
                + (" (the lower of this and the conversation's)" if mode == "thermal" else ""),
                unit="frames/s", minimum=0.5, maximum=60.0, live=True)
      for mode, value in _FPS_DEFAULTS.items()),
    *(ParamSpec(f"vision.rate_{mode}", value, f"Vision encoder rate in {mode.upper()}"
                + (" (the lower of this and the conversation's)" if mode == "thermal" else ""),
                unit="frames/s", minimum=0.5, maximum=30.0, live=True)
      for mode, value in _VISION_DEFAULTS.items()),
    ParamSpec("llm.threads", 2, "LLM threads outside THERMAL_LIMIT (0: leave the LLM's "
              "threads alone)", minimum=0, maximum=64, live=True),
    ParamSpec("llm.threads_thermal", 1, "LLM threads in THERMAL_LIMIT", minimum=1,
              maximum=64, live=True),
    ParamSpec("llm.unload_in_sleep", True, "Deactivate the LLM's node in SLEEP (frees its "
              "memory); it is activated again the moment the conversation starts", live=True),
    ParamSpec("cpu.control", "auto", "CPU governor and frequency cap: write them when "
              "cpufreq is writable (auto), only report what to set (advise), or nothing (off)",
              choices=("auto", "advise", "off"), live=True),
    ParamSpec("cpu.governor_awake", "schedutil", "Governor in ACTIVE and LISTEN (empty: leave "
              "it; skipped when the kernel does not offer it)", live=True),
    ParamSpec("cpu.governor_asleep", "powersave", "Governor in IDLE, SLEEP and THERMAL_LIMIT "
              "(empty: leave it)", live=True),
    ParamSpec("cpu.thermal_max_freq_ratio", 0.6, "Frequency cap in THERMAL_LIMIT, as a "
              "share of the hardware maximum (1 elsewhere)", minimum=0.1, maximum=1.0,
              live=True),
)

# Parameters set on the targets.
CAMERA_FPS_PARAM = "fps"
VISION_RATE_PARAM = "vision.rate_hz"
LLM_THREADS_PARAM = "llm.threads"
# A confirmed setting is sent again after this long, in case its node restarted.
_REASSERT_S = 30.0
# Failures of one target are logged at most this often (each is counted).
_LOG_THROTTLE_S = 10.0
# Failures this soon after start are counted but not logged: nodes launched together take a
# moment to discover each other's services.
_STARTUP_GRACE_S = 5.0

_STATE_NAMES = {State.PRIMARY_STATE_UNCONFIGURED: "unconfigured",
                State.PRIMARY_STATE_INACTIVE: "inactive", State.PRIMARY_STATE_ACTIVE: "active",
                State.PRIMARY_STATE_FINALIZED: "finalized"}
_TRANSITION_NAMES = {Transition.TRANSITION_CONFIGURE: "configure",
                     Transition.TRANSITION_ACTIVATE: "activate",
                     Transition.TRANSITION_DEACTIVATE: "deactivate",
                     Transition.TRANSITION_CLEANUP: "cleanup"}


def _check(params: dict[str, object]) -> str | None:
    """What is wrong between parameters (each one alone is checked by its spec)."""
    if params["model.max_w"] < params["model.idle_w"]:
        return (f"model.max_w ({params['model.max_w']} W) is below model.idle_w "
                f"({params['model.idle_w']} W): the board cannot draw less when busy")
    if params["policy.sleep_after_s"] < params["policy.idle_after_s"]:
        return (f"policy.sleep_after_s ({params['policy.sleep_after_s']} s) is below "
                f"policy.idle_after_s ({params['policy.idle_after_s']} s): SLEEP comes after "
                "IDLE")
    if params["budget.peak_w"] < params["budget.sustained_w"]:
        return (f"budget.peak_w ({params['budget.peak_w']} W) is below budget.sustained_w "
                f"({params['budget.sustained_w']} W)")
    return None


class _Remote:
    """One setting on another node, brought to the wanted value by async service calls:
    at most one call in flight, each with a timeout; a failure is logged (throttled),
    counted, and retried on the next tick. Runs entirely on the node's executor."""

    def __init__(self, node: PowerManagerNode, what: str) -> None:
        self.node = node
        self.what = what
        self.wanted: object = None
        self.confirmed: object = None
        self.confirmed_at = 0.0
        self.failures = 0
        self.error = ""
        self._future = None
        self._client = None
        self._deadline = 0.0
        self._last_log = -math.inf

    def want(self, value: object) -> None:
        if value != self.wanted:
            self.wanted = value
            self.confirmed = None

    @property
    def status(self) -> str:
        if self.error:
            return f"failing ({self.failures} failures): {self.error}"
        if self.wanted is None or self.confirmed == self.wanted:
            return f"ok: {self.confirmed}" if self.wanted is not None else "idle"
        return f"pending: {self.wanted}"

    def tick(self, now: float) -> None:
        if self._future is not None:
            if self._future.done() or now < self._deadline:
                return
            self._client.remove_pending_request(self._future)
            self._future = None
            self.fail(RemoteCallError(f"{self._call_name} did not answer within "
                                      f"{self._timeout:g} s"))
            return
        if self.wanted is None:
            return
        if self.confirmed == self.wanted and now - self.confirmed_at < _REASSERT_S:
            return
        self.start(now)

    def call(self, client, request, timeout: float, callback) -> None:
        """Send ``request`` if the service is there; ``callback(response)`` on the answer."""
        name = client.srv_name
        if not client.service_is_ready():
            self.fail(RemoteCallError(f"{name} is not available (is the node running?)"))
            return
        self._client, self._call_name, self._timeout = client, name, timeout
        self._deadline = time.monotonic() + timeout
        future = client.call_async(request)
        self._future = future

        def done(_future) -> None:
            if self._future is not future:
                return  # abandoned after its timeout
            self._future = None
            try:
                response = future.result()
            except Exception as err:  # noqa: BLE001 - any transport failure is a failure
                self.fail(RemoteCallError(f"{name} failed: {err}"))
                return
            callback(response)
        future.add_done_callback(done)

    def succeed(self, value: object) -> None:
        if self.error:
            self.node.get_logger().info(
                f"{self.what}: {value} (answering again after {self.failures} failures)")
        elif value != self.confirmed:
            self.node.get_logger().info(f"{self.what}: {value}")
        self.confirmed, self.confirmed_at, self.error = value, time.monotonic(), ""
        if self.wanted != value:  # changed while the call was in flight: at once, not later
            self.start(self.confirmed_at)

    def fail(self, error: RemoteCallError) -> None:
        self.failures += 1
        self.error = str(error)
        now = time.monotonic()
        if now - self.node.started >= _STARTUP_GRACE_S and \
                now - self._last_log >= _LOG_THROTTLE_S:
            self._last_log = now
            self.node.get_logger().warning(
                f"{self.what} -> {self.wanted}: {error}; retrying every period "
                f"({self.failures} failures so far)")

    def start(self, now: float) -> None:
        raise NotImplementedError


class _RemoteParameter(_Remote):
    """A parameter of another node, through its ``set_parameters`` service."""

    def __init__(self, node: PowerManagerNode, target: str, parameter: str) -> None:
        super().__init__(node, f"{target}.{parameter}")
        self.parameter = parameter
        self._set = node.create_client(SetParameters, f"{target}/set_parameters")

    def start(self, now: float) -> None:
        value = self.wanted
        request = SetParameters.Request(parameters=[ParameterMsg(
            name=self.parameter, value=Parameter(self.parameter, value=value)
            .get_parameter_value())])

        def answered(response) -> None:
            result = response.results[0] if response.results else None
            if result is not None and result.successful:
                self.succeed(value)
            else:
                reason = result.reason if result is not None else "no result"
                self.fail(RemoteCallError(f"{self._set.srv_name} refused {self.parameter}="
                                          f"{value}: {reason}"))
        self.call(self._set, request, self.node.params["targets.timeout_s"], answered)


class _RemoteLifecycle(_Remote):
    """The lifecycle state of another node: True = active, False = not active (a deactivate
    from active; an unconfigured node counts as not active). Reaching active may take two
    transitions (configure, activate), chained as answers come."""

    def __init__(self, node: PowerManagerNode, target: str) -> None:
        super().__init__(node, f"{target} lifecycle")
        self._get = node.create_client(GetState, f"{target}/get_state")
        self._change = node.create_client(ChangeState, f"{target}/change_state")

    def start(self, now: float) -> None:
        self.call(self._get, GetState.Request(), self.node.params["targets.timeout_s"],
                  self._on_state)

    def _on_state(self, response) -> None:
        state = response.current_state.id
        # Asleep means unconfigured: cleanup is what frees the model's memory.
        goal = State.PRIMARY_STATE_ACTIVE if self.wanted else State.PRIMARY_STATE_UNCONFIGURED
        if state == goal:
            self.succeed(self.wanted)
            return
        if self.wanted:
            transition = {State.PRIMARY_STATE_UNCONFIGURED: Transition.TRANSITION_CONFIGURE,
                          State.PRIMARY_STATE_INACTIVE: Transition.TRANSITION_ACTIVATE}.get(
                state)
        else:
            transition = {State.PRIMARY_STATE_ACTIVE: Transition.TRANSITION_DEACTIVATE,
                          State.PRIMARY_STATE_INACTIVE: Transition.TRANSITION_CLEANUP}.get(
                state)
        if transition is None:  # e.g. finalized, or in a transition
            wanted = "active" if self.wanted else "unconfigured"
            self.fail(RemoteCallError(f"{self._get.srv_name}: cannot reach '{wanted}' from "
                                      f"state {_STATE_NAMES.get(state, state)}"))
            return

        def changed(result) -> None:
            if not result.success:
                self.fail(RemoteCallError(
                    f"{self._change.srv_name}: {_TRANSITION_NAMES[transition]} failed (the "
                    "node's log says why)"))
                return
            self.start(time.monotonic())  # next step, or confirmation
        self.call(self._change, ChangeState.Request(transition=Transition(id=transition)),
                  self.node.params["targets.transition_timeout_s"], changed)


class PowerManagerNode(Node):
    """Watches the machine and the conversation; turns rates and models down when nobody
    talks and up the moment someone does.

    ROS contract:
        node name: ``power_manager`` (a plain node: it drives other nodes' lifecycles).
        subscribes:
            ``dialogue_state`` (omniflow/msg/DialogueState, latched): anything but LISTENING
            is conversation; leaving LISTENING wakes to ACTIVE at once (not at the next
            period).
            ``voice_activity`` (omniflow/msg/VoiceActivity, best effort: matches either
            kind of publisher): START/ONGOING count as interaction (wakes even if the
            dialogue node is asleep).
        publishes:
            ``power_state`` (omniflow/msg/PowerState, latched): the mode, why, the readings,
            the camera rate asked for; every period.
            ``/diagnostics`` (diagnostic_msgs/DiagnosticArray): every reading, the mode, each
            target's status, CPU advice; every period.
        calls (each with a timeout; failures logged, counted, retried next period):
            ``<targets.camera>/set_parameters``: ``fps``;
            ``<targets.vision>/set_parameters``: ``vision.rate_hz``;
            ``<targets.llm>/set_parameters``: ``llm.threads``; ``<targets.llm>/get_state``
            and ``change_state``: deactivate in SLEEP, configure/activate on waking.
        writes: ``cpufreq/scaling_governor`` and ``scaling_max_freq`` under ``sysfs_root``
            when writable (``cpu.control: auto``), else reports them as advice.
        parameters: see ``PARAMS``; all but ``period_s``, ``sysfs_root`` and
            ``targets.*`` names apply at once.

    Threads: one SingleThreadedExecutor; every remote call is async (a future with a
    deadline checked each period), so a target that never answers costs nothing.
    """

    def __init__(self, *, reader: sysfs.TelemetryReader | None = None, **kwargs) -> None:
        super().__init__("power_manager", **kwargs)
        self.started = time.monotonic()
        declare_parameters(self, PARAMS, apply=self._on_parameters)
        self.params = parameter_values(self, PARAMS)
        problem = _check(self.params)
        if problem:
            raise ConfigError(problem)
        self._reader = reader or sysfs.TelemetryReader(
            self.params["sysfs_root"], self._power_model())
        self._policy = PowerPolicy(self._policy_config())
        self._actions = self._action_config()
        self._telemetry = telemetry.Telemetry()
        self._dialogue: int | None = None
        self._voice_heard = False
        self._decision: Decision | None = None
        self._plan: Plan | None = None
        self._cpu_applied: tuple[str, float] | None = None
        self._cpu_advice = ""
        self._remotes: dict[str, _Remote] = {}
        camera, vision, llm = (self.params[f"targets.{name}"]
                               for name in ("camera", "vision", "llm"))
        if camera:
            self._remotes["camera_fps"] = _RemoteParameter(self, camera, CAMERA_FPS_PARAM)
        if vision:
            self._remotes["vision_rate"] = _RemoteParameter(self, vision, VISION_RATE_PARAM)
        if llm:
            self._remotes["llm_threads"] = _RemoteParameter(self, llm, LLM_THREADS_PARAM)
            self._remotes["llm_active"] = _RemoteLifecycle(self, llm)
        self._state_pub = self.create_publisher(PowerState, "power_state", LATCHED)
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(DialogueState, "dialogue_state", self._on_dialogue, LATCHED)
        # Best effort matches a voice-activity publisher of either reliability.
        self.create_subscription(VoiceActivity, "voice_activity", self._on_voice, SENSOR_DATA)
        self._reader.sample(time.monotonic())  # CPU load needs a previous sample
        self.create_timer(self.params["period_s"], self._tick)
        self.get_logger().info(
            f"reading {self.params['sysfs_root']}; board: {self._reader.board or 'unknown'}; "
            f"targets: camera={camera!r} vision={vision!r} llm={llm!r}")

    # ----------------------------------------------------------------- configuration
    def _power_model(self) -> telemetry.PowerModel:
        return telemetry.PowerModel(self.params["model.idle_w"], self.params["model.max_w"])

    def _policy_config(self) -> PolicyConfig:
        p = self.params
        return PolicyConfig(
            active_hold_s=p["policy.active_hold_s"], idle_after_s=p["policy.idle_after_s"],
            sleep_after_s=p["policy.sleep_after_s"], min_dwell_s=p["policy.min_dwell_s"],
            temperature_c=p["budget.temperature_c"],
            temperature_hysteresis_c=p["budget.temperature_hysteresis_c"],
            sustained_w=p["budget.sustained_w"], peak_w=p["budget.peak_w"],
            power_window_s=p["budget.power_window_s"],
            power_hysteresis=p["budget.power_hysteresis"],
            power_from_estimate=p["budget.power_from_estimate"],
            battery_low_percent=p["budget.battery_low_percent"])

    def _action_config(self) -> ActionConfig:
        p = self.params
        return ActionConfig(
            camera_fps={_MODE_KEYS[m]: p[f"camera.fps_{m}"] for m in _MODES},
            vision_rate_hz={_MODE_KEYS[m]: p[f"vision.rate_{m}"] for m in _MODES},
            llm_threads=p["llm.threads"], llm_threads_thermal=p["llm.threads_thermal"],
            llm_unload_in_sleep=p["llm.unload_in_sleep"],
            governor_awake=p["cpu.governor_awake"], governor_asleep=p["cpu.governor_asleep"],
            thermal_max_freq_ratio=p["cpu.thermal_max_freq_ratio"])

    def _on_parameters(self, changes: dict[str, object]) -> str | None:
        problem = _check({**self.params, **changes})
        if problem:
            return problem
        self.params.update(changes)
        self._policy.config = self._policy_config()
        self._actions = self._action_config()
        self._reader.model = self._power_model()
        self._cpu_applied = None
        return None

    # ----------------------------------------------------------------- inputs
    def _on_dialogue(self, msg: DialogueState) -> None:
        woke = self._dialogue in (None, DialogueState.LISTENING) and \
            msg.state != DialogueState.LISTENING
        self._dialogue = msg.state
        if woke and self._decide():  # at once, not at the next period
            self._publish()

    def _on_voice(self, msg: VoiceActivity) -> None:
        if msg.event in (VoiceActivity.START, VoiceActivity.ONGOING):
            first = not self._voice_heard
            self._voice_heard = True
            if first and self._decide():
                self._publish()

    # ----------------------------------------------------------------- the period
    def _tick(self) -> None:
        try:
            self._telemetry = self._reader.sample(time.monotonic())
        except (OSError, ValueError) as err:  # a failing reader must not stop the policy
            self.get_logger().error(f"telemetry failed: {err}", throttle_duration_sec=10.0)
        self._decide()
        self._voice_heard = False
        self._publish()

    def _decide(self) -> bool:
        """Run the policy and apply its plan; True when the mode changed."""
        t = self._telemetry
        conversation = None
        if self._dialogue is not None:
            conversation = self._dialogue != DialogueState.LISTENING
        if self._voice_heard:
            conversation = True
        decision = self._policy.step(PolicyInput(
            now_s=time.monotonic(), conversation=conversation, temperature_c=t.temperature_c,
            power_w=t.power_w, power_estimated=t.power_estimated,
            battery_percent=t.battery_percent, battery_charging=t.battery_charging))
        if decision.changed or self._decision is None:
            previous = self._decision.mode.name if self._decision else "start"
            self.get_logger().info(f"mode {previous} -> {decision.mode.name}: {decision.reason}")
        self._decision = decision
        self._plan = plan(decision, self._actions)
        self._apply(self._plan)
        return decision.changed

    def _apply(self, settings: Plan) -> None:
        wanted = {"camera_fps": settings.camera_fps, "vision_rate": settings.vision_rate_hz,
                  "llm_threads": settings.llm_threads or None,
                  "llm_active": settings.llm_active}
        now = time.monotonic()
        for key, remote in self._remotes.items():
            remote.want(wanted[key])
            remote.tick(now)
        self._apply_cpu(settings)

    def _apply_cpu(self, settings: Plan) -> None:
        control = self.params["cpu.control"]
        target = (settings.governor, settings.max_freq_ratio)
        if control == "off" or target == self._cpu_applied:
            return
        self._cpu_applied = target
        root = self.params["sysfs_root"]
        cpus = sysfs.cpu_frequencies(root)
        if not cpus:
            self._cpu_advice = "no cpufreq on this machine: nothing to set"
            return
        governor, ratio = target
        offered = set(cpus[0].available_governors)
        if governor and offered and governor not in offered:
            governor = ""
        advice, refused = [], []
        if governor:
            advice.append(f"governor {governor}")
        advice.append(f"max frequency {ratio:.0%} of the hardware maximum")
        if control == "auto":
            if governor:
                refused += sysfs.write_cpufreq(root, "scaling_governor", governor)[1]
            refused += sysfs.write_cpufreq(
                root, "scaling_max_freq", lambda cpu: telemetry.max_freq_khz_text(cpu, ratio))[1]
        if control == "advise" or refused:
            why = f" ({len(refused)} cpufreq files not writable)" if refused else ""
            self._cpu_advice = "set " + ", ".join(advice) + why
            self.get_logger().info(f"CPU advice: {self._cpu_advice}")
        else:
            self._cpu_advice = ""
            self.get_logger().info(f"CPU: {', '.join(advice)}")

    def release(self) -> None:
        """Lift a frequency cap this node wrote (at exit: a capped CPU must not outlive the
        node that watches its temperature)."""
        if self._cpu_applied is None or self._cpu_applied[1] >= 1.0 or \
                self.params["cpu.control"] != "auto":
            return
        sysfs.write_cpufreq(self.params["sysfs_root"], "scaling_max_freq",
                            lambda cpu: telemetry.max_freq_khz_text(cpu, 1.0))
        self._cpu_applied = None

    # ----------------------------------------------------------------- outputs
    def _publish(self) -> None:
        decision, settings, t = self._decision, self._plan, self._telemetry
        if decision is None:
            return
        stamp = self.get_clock().now().nanoseconds
        self._state_pub.publish(PowerState(
            header=header(stamp, ""), mode=int(decision.mode), reason=decision.reason,
            temperature_c=t.temperature_c, power_w=t.power_w,
            power_estimated=t.power_estimated, cpu_load=t.cpu_load,
            battery_percent=t.battery_percent, camera_fps=settings.camera_fps))
        failing = [r.what for r in self._remotes.values() if r.error]
        level = DiagnosticStatus.OK
        if decision.mode == Mode.THERMAL_LIMIT or failing or t.throttled:
            level = DiagnosticStatus.WARN
        message = f"{decision.mode.name}: {decision.reason}"
        if failing:
            message += f"; not answering: {', '.join(failing)}"
        values = [("mode", decision.mode.name), ("wanted_mode", decision.wanted.name),
                  ("reason", decision.reason), *t.values(),
                  ("sustained_power_w", "nan" if math.isnan(decision.sustained_w)
                   else f"{decision.sustained_w:.2f}"),
                  ("camera_fps", f"{settings.camera_fps:g}"),
                  ("vision_rate_hz", f"{settings.vision_rate_hz:g}"),
                  ("llm_threads", str(settings.llm_threads)),
                  ("llm_active", str(settings.llm_active).lower()),
                  ("cpu_advice", self._cpu_advice)]
        values += [(f"target.{r.what}", r.status) for r in self._remotes.values()]
        status = DiagnosticStatus(
            level=level, name=f"omniflow: {self.get_fully_qualified_name()}",
            message=message, hardware_id=t.board or "host",
            values=[KeyValue(key=k, value=v) for k, v in values])
        self._diagnostics.publish(DiagnosticArray(header=header(stamp, ""), status=[status]))


def main(args: list[str] | None = None) -> int:
    """Run the power manager until shutdown (2: bad parameter)."""
    return run_node(PowerManagerNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
