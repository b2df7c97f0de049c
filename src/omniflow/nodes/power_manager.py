"""Power manager node: telemetry, a DVFS-like mode policy, and the actions on other nodes."""

from __future__ import annotations

import math
import time

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
from omniflow.core.stats import OK, WARN
from omniflow.devices import sysfs
from omniflow.errors import ConfigError
from omniflow.msg import DialogueState, PowerState, VoiceActivity
from omniflow.ros.conversions import header
from omniflow.ros.lifecycle import AUTOSTART, Diagnosis, LifecycleBase
from omniflow.ros.qos import LATCHED, SENSOR_DATA, STATE_CHANGES
from omniflow.ros.remote import RemoteLifecycle, RemoteParameter, RemoteSetting
from omniflow.ros.run import run_node

_MODES = ("active", "listen", "idle", "sleep", "thermal")
_MODE_KEYS = dict(
    zip(_MODES, (Mode.ACTIVE, Mode.LISTEN, Mode.IDLE, Mode.SLEEP, Mode.THERMAL_LIMIT), strict=True)
)
_FPS_DEFAULTS = {"active": 30.0, "listen": 15.0, "idle": 10.0, "sleep": 2.0, "thermal": 10.0}
_VISION_DEFAULTS = {"active": 5.0, "listen": 2.0, "idle": 1.0, "sleep": 0.5, "thermal": 1.0}


def _rate_specs(
    prefix: str, what: str, defaults: dict[str, float], maximum: float
) -> tuple[ParamSpec, ...]:
    """One live rate parameter per power mode (``<prefix>_<mode>``), in frames/s."""
    return tuple(
        ParamSpec(
            f"{prefix}_{mode}",
            value,
            f"{what} in {mode.upper()}"
            + (" (the lower of this and the conversation's)" if mode == "thermal" else ""),
            unit="frames/s",
            minimum=0.5,
            maximum=maximum,
            live=True,
        )
        for mode, value in defaults.items()
    )


PARAMS = (
    ParamSpec(
        "period_s",
        1.0,
        "Telemetry, policy and actions run once per period",
        unit="s",
        minimum=0.1,
        maximum=60.0,
        read_only=True,
    ),
    ParamSpec(
        "sysfs_root",
        "/",
        "Filesystem root holding sys/ and proc/ (a fake tree in tests)",
        read_only=True,
    ),
    ParamSpec(
        "targets.camera",
        "camera",
        "Camera node whose 'fps' is set (relative names "
        "resolve in this node's namespace; empty: none)",
        read_only=True,
    ),
    ParamSpec(
        "targets.vision",
        "fusion",
        "Node whose 'vision.rate_hz' is set (the vision "
        "encoder; never deactivated: it also hears the speech that wakes the robot; "
        "empty: none)",
        read_only=True,
    ),
    ParamSpec(
        "targets.llm",
        "dialogue",
        "Lifecycle node holding the LLM: deactivated and "
        "cleaned up in SLEEP (the model's memory is freed), configured and activated "
        "on waking; its 'llm.threads' is set (empty: none)",
        read_only=True,
    ),
    ParamSpec(
        "targets.timeout_s",
        2.0,
        "A parameter or get-state call not answered within "
        "this is abandoned, logged and retried next period",
        unit="s",
        minimum=0.1,
        maximum=60.0,
        live=True,
    ),
    ParamSpec(
        "targets.transition_timeout_s",
        30.0,
        "Same for a lifecycle transition (loading a model on configure can take seconds)",
        unit="s",
        minimum=0.5,
        maximum=300.0,
        live=True,
    ),
    ParamSpec(
        "policy.active_hold_s",
        10.0,
        "ACTIVE is kept this long after the dialogue returns to LISTENING (pauses between turns)",
        unit="s",
        minimum=0.0,
        maximum=3600.0,
        live=True,
    ),
    ParamSpec(
        "policy.idle_after_s",
        60.0,
        "IDLE after this long without interaction",
        unit="s",
        minimum=0.0,
        maximum=86400.0,
        live=True,
    ),
    ParamSpec(
        "policy.sleep_after_s",
        300.0,
        "SLEEP after this long without interaction",
        unit="s",
        minimum=0.0,
        maximum=86400.0,
        live=True,
    ),
    ParamSpec(
        "policy.min_dwell_s",
        5.0,
        "Least time in a mode before moving to a lower-power "
        "one or leaving THERMAL_LIMIT (waking and entering THERMAL_LIMIT are immediate)",
        unit="s",
        minimum=0.0,
        maximum=3600.0,
        live=True,
    ),
    ParamSpec(
        "budget.temperature_c",
        40.0,
        "THERMAL_LIMIT at or above this temperature (hottest zone; phone-class default)",
        unit="°C",
        minimum=20.0,
        maximum=120.0,
        live=True,
    ),
    ParamSpec(
        "budget.temperature_hysteresis_c",
        3.0,
        "THERMAL_LIMIT ends only below the limit minus this",
        unit="°C",
        minimum=0.0,
        maximum=30.0,
        live=True,
    ),
    ParamSpec(
        "budget.sustained_w",
        2.0,
        "THERMAL_LIMIT when the power averaged over "
        "budget.power_window_s exceeds this (phone-class default)",
        unit="W",
        minimum=0.1,
        maximum=1000.0,
        live=True,
    ),
    ParamSpec(
        "budget.peak_w",
        5.0,
        "THERMAL_LIMIT when one power reading exceeds this",
        unit="W",
        minimum=0.1,
        maximum=1000.0,
        live=True,
    ),
    ParamSpec(
        "budget.power_window_s",
        30.0,
        "Time constant of the sustained power average",
        unit="s",
        minimum=1.0,
        maximum=3600.0,
        live=True,
    ),
    ParamSpec(
        "budget.power_hysteresis",
        0.1,
        "THERMAL_LIMIT ends only below each power budget times (1 - this)",
        minimum=0.0,
        maximum=0.9,
        live=True,
    ),
    ParamSpec(
        "budget.power_from_estimate",
        False,
        "Let a modelled power estimate (no sensor) count against the power budgets",
        live=True,
    ),
    ParamSpec(
        "budget.battery_low_percent",
        20.0,
        "Below this, on battery, LISTEN is skipped and SLEEP comes at policy.idle_after_s",
        unit="%",
        minimum=0.0,
        maximum=100.0,
        live=True,
    ),
    ParamSpec(
        "model.idle_w",
        0.5,
        "Power model when no sensor exists: the board at rest "
        "(P = idle + (max - idle) * load * (f/f_max)^2)",
        unit="W",
        minimum=0.0,
        maximum=1000.0,
        live=True,
    ),
    ParamSpec(
        "model.max_w",
        4.5,
        "Power model: every core busy at the highest frequency",
        unit="W",
        minimum=0.0,
        maximum=1000.0,
        live=True,
    ),
    *_rate_specs("camera.fps", "Camera frame rate", _FPS_DEFAULTS, 60.0),
    *_rate_specs("vision.rate", "Vision encoder rate", _VISION_DEFAULTS, 30.0),
    ParamSpec(
        "llm.threads",
        2,
        "LLM threads outside THERMAL_LIMIT (0: leave the LLM's threads alone)",
        minimum=0,
        maximum=64,
        live=True,
    ),
    ParamSpec(
        "llm.threads_thermal", 1, "LLM threads in THERMAL_LIMIT", minimum=1, maximum=64, live=True
    ),
    ParamSpec(
        "llm.unload_in_sleep",
        True,
        "Deactivate the LLM's node in SLEEP (frees its "
        "memory); it is activated again the moment the conversation starts",
        live=True,
    ),
    ParamSpec(
        "cpu.control",
        "auto",
        "CPU governor and frequency cap: write them when "
        "cpufreq is writable (auto), only report what to set (advise), or nothing (off)",
        choices=("auto", "advise", "off"),
        live=True,
    ),
    ParamSpec(
        "cpu.governor_awake",
        "schedutil",
        "Governor in ACTIVE and LISTEN (empty: leave "
        "it; skipped when the kernel does not offer it)",
        live=True,
    ),
    ParamSpec(
        "cpu.governor_asleep",
        "powersave",
        "Governor in IDLE, SLEEP and THERMAL_LIMIT (empty: leave it)",
        live=True,
    ),
    ParamSpec(
        "cpu.thermal_max_freq_ratio",
        0.6,
        "Frequency cap in THERMAL_LIMIT, as a share of the hardware maximum (1 elsewhere)",
        minimum=0.1,
        maximum=1.0,
        live=True,
    ),
    AUTOSTART,
)

# Parameters set on the targets.
CAMERA_FPS_PARAM = "fps"
VISION_RATE_PARAM = "vision.rate_hz"
LLM_THREADS_PARAM = "llm.threads"


def _check(params: dict[str, object]) -> str | None:
    """What is wrong between parameters (each one alone is checked by its spec)."""
    if params["model.max_w"] < params["model.idle_w"]:
        return (
            f"model.max_w ({params['model.max_w']} W) is below model.idle_w "
            f"({params['model.idle_w']} W): the board cannot draw less when busy"
        )
    if params["policy.sleep_after_s"] < params["policy.idle_after_s"]:
        return (
            f"policy.sleep_after_s ({params['policy.sleep_after_s']} s) is below "
            f"policy.idle_after_s ({params['policy.idle_after_s']} s): SLEEP comes after "
            "IDLE"
        )
    if params["budget.peak_w"] < params["budget.sustained_w"]:
        return (
            f"budget.peak_w ({params['budget.peak_w']} W) is below budget.sustained_w "
            f"({params['budget.sustained_w']} W)"
        )
    return None


class PowerManagerNode(LifecycleBase):
    """Watches the machine and the conversation; turns rates and models down when nobody
    talks and up the moment someone does.

    ROS contract:
        node name: ``power_manager`` (lifecycle; autostarts unless ``autostart:=false``;
            it drives the lifecycle of ``targets.llm``). Configure reads the machine once and
            creates the service clients; activate starts the period; deactivate stops it and
            lifts a frequency cap it wrote; cleanup, shutdown and exit do the same.
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
            target's status, CPU advice; with every ``power_state``.
            ``~/status`` (std_msgs/String, latched): lifecycle state, mode and targets (JSON).
        calls (each with a timeout; failures logged, counted, retried next period):
            ``<targets.camera>/set_parameters``: ``fps``;
            ``<targets.vision>/set_parameters``: ``vision.rate_hz``;
            ``<targets.llm>/set_parameters``: ``llm.threads``; ``<targets.llm>/get_state``
            and ``change_state``: deactivate and clean up in SLEEP, configure/activate on
            waking.
        writes: ``cpufreq/scaling_governor`` and ``scaling_max_freq`` under ``sysfs_root``
            when writable (``cpu.control: auto``), else reports them as advice.
        parameters: see ``PARAMS``, and the shared ``autostart``; all but ``autostart``,
            ``period_s``, ``sysfs_root`` and ``targets.*`` names apply at once.

    Threads: one SingleThreadedExecutor; every remote call is async (a future with a
    deadline checked each period), so a target that never answers costs nothing.
    """

    def __init__(self, *, reader: sysfs.TelemetryReader | None = None, **kwargs) -> None:
        # Diagnostics go out with each decision (see _publish), not on a timer of their own.
        super().__init__("power_manager", PARAMS, diagnostics_period_s=None, **kwargs)
        problem = _check(self.params)
        if problem:
            raise ConfigError(problem)
        self._given_reader = reader
        self._reader: sysfs.TelemetryReader | None = None
        self._policy: PowerPolicy | None = None
        self._actions = self._action_config()
        self._telemetry = telemetry.Telemetry()
        self._dialogue: int | None = None
        self._voice_heard = False
        self._decision: Decision | None = None
        self._plan: Plan | None = None
        self._cpu_applied: tuple[str, float] | None = None
        self._cpu_advice = ""
        self._remotes: dict[str, RemoteSetting] = {}
        self._timer = None
        self._state_pub = self.create_publisher(PowerState, "power_state", LATCHED)
        self.create_subscription(DialogueState, "dialogue_state", self._on_dialogue, STATE_CHANGES)
        # Best effort matches a voice-activity publisher of either reliability.
        self.create_subscription(VoiceActivity, "voice_activity", self._on_voice, SENSOR_DATA)

    # ----------------------------------------------------------------- lifecycle
    def configure(self) -> str:
        problem = _check(self.params)
        if problem:
            raise ConfigError(problem)
        root = self.params["sysfs_root"]
        self._reader = self._given_reader or sysfs.TelemetryReader(root, self._power_model())
        self._policy = PowerPolicy(self._policy_config())
        self._actions = self._action_config()
        self._decision = self._plan = None
        camera, vision, llm = (
            self.params[f"targets.{name}"] for name in ("camera", "vision", "llm")
        )

        def timeout() -> float:
            return self.params["targets.timeout_s"]

        def transition_timeout() -> float:
            return self.params["targets.transition_timeout_s"]

        if camera:
            self._remotes["camera_fps"] = RemoteParameter(self, camera, CAMERA_FPS_PARAM, timeout)
        if vision:
            self._remotes["vision_rate"] = RemoteParameter(self, vision, VISION_RATE_PARAM, timeout)
        if llm:
            self._remotes["llm_threads"] = RemoteParameter(self, llm, LLM_THREADS_PARAM, timeout)
            self._remotes["llm_active"] = RemoteLifecycle(self, llm, timeout, transition_timeout)
        self._reader.sample(time.monotonic())  # CPU load needs a previous sample
        return (
            f"reading {root}; board: {self._reader.board or 'unknown'}; "
            f"targets: camera={camera!r} vision={vision!r} llm={llm!r}"
        )

    def activate(self) -> None:
        self._cpu_applied = None  # what deactivate lifted is written again
        self._timer = self.create_timer(self.params["period_s"], self._tick)

    def deactivate(self) -> None:
        self._stop_period()
        self._lift_cap()
        self.stop_workers()

    def release_resources(self) -> None:
        self._lift_cap()
        self._stop_period()
        for remote in self._remotes.values():
            remote.close()
        self._remotes = {}
        self._reader = self._policy = None

    def apply_live(self, changes: dict[str, object]) -> str | None:
        problem = _check(self.params)
        if problem:
            return problem
        self._policy.config = self._policy_config()
        self._actions = self._action_config()
        self._reader.model = self._power_model()
        self._cpu_applied = None
        return None

    def _stop_period(self) -> None:
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None

    # ----------------------------------------------------------------- configuration
    def _power_model(self) -> telemetry.PowerModel:
        return telemetry.PowerModel(self.params["model.idle_w"], self.params["model.max_w"])

    def _policy_config(self) -> PolicyConfig:
        p = self.params
        return PolicyConfig(
            active_hold_s=p["policy.active_hold_s"],
            idle_after_s=p["policy.idle_after_s"],
            sleep_after_s=p["policy.sleep_after_s"],
            min_dwell_s=p["policy.min_dwell_s"],
            temperature_c=p["budget.temperature_c"],
            temperature_hysteresis_c=p["budget.temperature_hysteresis_c"],
            sustained_w=p["budget.sustained_w"],
            peak_w=p["budget.peak_w"],
            power_window_s=p["budget.power_window_s"],
            power_hysteresis=p["budget.power_hysteresis"],
            power_from_estimate=p["budget.power_from_estimate"],
            battery_low_percent=p["budget.battery_low_percent"],
        )

    def _action_config(self) -> ActionConfig:
        p = self.params
        return ActionConfig(
            camera_fps={_MODE_KEYS[m]: p[f"camera.fps_{m}"] for m in _MODES},
            vision_rate_hz={_MODE_KEYS[m]: p[f"vision.rate_{m}"] for m in _MODES},
            llm_threads=p["llm.threads"],
            llm_threads_thermal=p["llm.threads_thermal"],
            llm_unload_in_sleep=p["llm.unload_in_sleep"],
            governor_awake=p["cpu.governor_awake"],
            governor_asleep=p["cpu.governor_asleep"],
            thermal_max_freq_ratio=p["cpu.thermal_max_freq_ratio"],
        )

    # ----------------------------------------------------------------- inputs
    def _on_dialogue(self, msg: DialogueState) -> None:
        woke = (
            self._dialogue in (None, DialogueState.LISTENING)
            and msg.state != DialogueState.LISTENING
        )
        self._dialogue = msg.state
        if woke and self._timer is not None and self._decide():  # at once, not next period
            self._publish()

    def _on_voice(self, msg: VoiceActivity) -> None:
        if msg.event in (VoiceActivity.START, VoiceActivity.ONGOING):
            first = not self._voice_heard
            self._voice_heard = True
            if first and self._timer is not None and self._decide():
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
        decision = self._policy.step(
            PolicyInput(
                now_s=time.monotonic(),
                conversation=conversation,
                temperature_c=t.temperature_c,
                power_w=t.power_w,
                power_estimated=t.power_estimated,
                battery_percent=t.battery_percent,
                battery_charging=t.battery_charging,
            )
        )
        if decision.changed or self._decision is None:
            previous = self._decision.mode.name if self._decision else "start"
            self.get_logger().info(f"mode {previous} -> {decision.mode.name}: {decision.reason}")
        self._decision = decision
        self._plan = plan(decision, self._actions)
        self._apply(self._plan)
        return decision.changed

    def _apply(self, settings: Plan) -> None:
        wanted = {
            "camera_fps": settings.camera_fps,
            "vision_rate": settings.vision_rate_hz,
            "llm_threads": settings.llm_threads or None,
            "llm_active": settings.llm_active,
        }
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
                root, "scaling_max_freq", lambda cpu: telemetry.max_freq_khz_text(cpu, ratio)
            )[1]
        if control == "advise" or refused:
            why = f" ({len(refused)} cpufreq files not writable)" if refused else ""
            self._cpu_advice = "set " + ", ".join(advice) + why
            self.get_logger().info(f"CPU advice: {self._cpu_advice}")
        else:
            self._cpu_advice = ""
            self.get_logger().info(f"CPU: {', '.join(advice)}")

    def _lift_cap(self) -> None:
        """Lift a frequency cap this node wrote (a capped CPU must not outlive the node that
        watches its temperature: called on deactivate, cleanup, shutdown and at exit)."""
        if (
            self._cpu_applied is None
            or self._cpu_applied[1] >= 1.0
            or self.params["cpu.control"] != "auto"
        ):
            return
        sysfs.write_cpufreq(
            self.params["sysfs_root"],
            "scaling_max_freq",
            lambda cpu: telemetry.max_freq_khz_text(cpu, 1.0),
        )
        self._cpu_applied = None

    # ----------------------------------------------------------------- outputs
    def _publish(self) -> None:
        decision, settings, t = self._decision, self._plan, self._telemetry
        if decision is None:
            return
        self._state_pub.publish(
            PowerState(
                header=header(self.now_ns(), ""),
                mode=int(decision.mode),
                reason=decision.reason,
                temperature_c=t.temperature_c,
                power_w=t.power_w,
                power_estimated=t.power_estimated,
                cpu_load=t.cpu_load,
                battery_percent=t.battery_percent,
                camera_fps=settings.camera_fps,
            )
        )
        self.report()

    def summary(self) -> dict[str, object]:
        result: dict[str, object] = {"state": self.state_text}
        if self._decision is not None:
            result.update(
                mode=self._decision.mode.name,
                reason=self._decision.reason,
                cpu_advice=self._cpu_advice,
                targets={r.what: r.status for r in self._remotes.values()},
            )
        return result

    def diagnosis(self) -> Diagnosis:
        decision, settings, t = self._decision, self._plan, self._telemetry
        if decision is None:
            return super().diagnosis()
        failing = [r.what for r in self._remotes.values() if r.error]
        level = OK
        if decision.mode == Mode.THERMAL_LIMIT or failing or t.throttled:
            level = WARN
        message = f"{decision.mode.name}: {decision.reason}"
        if failing:
            message += f"; not answering: {', '.join(failing)}"
        values = [
            ("mode", decision.mode.name),
            ("wanted_mode", decision.wanted.name),
            ("reason", decision.reason),
            *t.values(),
            (
                "sustained_power_w",
                "nan" if math.isnan(decision.sustained_w) else f"{decision.sustained_w:.2f}",
            ),
            ("camera_fps", f"{settings.camera_fps:g}"),
            ("vision_rate_hz", f"{settings.vision_rate_hz:g}"),
            ("llm_threads", str(settings.llm_threads)),
            ("llm_active", str(settings.llm_active).lower()),
            ("cpu_advice", self._cpu_advice),
        ]
        values += [(f"target.{r.what}", r.status) for r in self._remotes.values()]
        return Diagnosis(level, message, t.board or "host", dict(values))


def main(args: list[str] | None = None) -> int:
    """Run the power manager until shutdown (2: bad parameter)."""
    return run_node(PowerManagerNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
