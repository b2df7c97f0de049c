"""The nodes of an omniflow graph, as plain data: one description that the launch files,
the ``omniflow`` command, the demo and the tests all start from (``ros2 launch`` on robots,
child processes here). No ROS imports.

Three tables describe the graph, and everything else is derived from them by name:

- ``GRAPH_NODES``: the nodes, in launch order (a new node is one more name here);
- ``TOPICS``: every topic of the graph with its type, QoS and publishing node; the recorder,
  the replay regression and the demo report use the topics whose publisher is running, so a
  node's topics are picked up as soon as the node is in ``GRAPH_NODES``;
- ``PROFILES``: how the graph runs on a robot PC, a Raspberry Pi 5 + Coral, and from a bag.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from omniflow.core.params import ACCELERATORS
from omniflow.errors import ConfigError
from omniflow.launcher import NodeSpec
from omniflow.security import ENCLAVE_ROOT

# Capture nodes own a device.
CAPTURE_NODES = ("audio_capture", "camera")
# Every node of the graph so far, in launch order.
GRAPH_NODES = (*CAPTURE_NODES, "fusion", "dialogue", "speech", "power_manager")
# Seconds before a node that died is started again (every node is respawned: the others notice
# its absence and its return, docs/design.md "Recovery").
RESPAWN_DELAY_S = 2.0

# The Fast DDS profile for processes that publish camera frames (config/fastdds/): a 16 MiB
# shared-memory segment instead of 512 KiB, so a full-HD frame crosses processes in ~9 ms
# instead of ~21 ms, and best-effort frames are not lost (benchmarks/README.md).
FRAME_PUBLISHER_PROFILE = ("config", "fastdds", "large_frames.xml")
# The Fast DDS profile of the process that receives frames beside audio (the fusion node): a
# deeper shared-memory port queue, so a burst of frame fragments cannot push audio chunks out
# (config/fastdds/frame_receiver.xml).
FRAME_RECEIVER_PROFILE = ("config", "fastdds", "frame_receiver.xml")
DDS_PROFILE_VARIABLE = "FASTRTPS_DEFAULT_PROFILES_FILE"
# The speech node runs with one glibc malloc arena instead of one per thread (up to eight a
# core): with an arena per thread it kept touching a page of its synthesis worker's arena every
# ten minutes or so for hours after its warm-up (0.04-0.05 MB/hour); with one it stays flat.
# The dialogue grew faster with one arena than without, and the others are flat either way
# (benchmarks/README.md, "Soak"). A value the user set is kept.
MALLOC_ARENAS_VARIABLE = "MALLOC_ARENA_MAX"
ONE_ARENA_NODES = ("speech",)

# QoS kinds of omniflow.ros.qos, by name (this module stays free of rclpy).
SENSOR_DATA, LATCHED, EVENTS = "sensor_data", "latched", "events"
# Events whose publisher keeps its recent ones for readers that join late (the answer).
KEPT_EVENTS = "kept_events"


@dataclass(frozen=True)
class TopicSpec:
    """One topic of the graph: relative name, ROS type (``pkg/msg/Name``; ``""``: whatever
    the running publisher declares), QoS kind, and the node that publishes it."""

    name: str
    msg_type: str
    qos: str
    publisher: str
    description: str = ""


# Every topic of the graph, the inputs first. Topics of nodes that are not running are skipped
# by whoever reads this table, so the topics of nodes still to come are listed already.
TOPICS = (
    TopicSpec(
        "audio",
        "omniflow/msg/AudioChunk",
        SENSOR_DATA,
        "audio_capture",
        "microphone blocks, 40 ms at 16 kHz, stamped with the first sample's capture time",
    ),
    TopicSpec("image_raw", "sensor_msgs/msg/Image", SENSOR_DATA, "camera", "camera frames"),
    TopicSpec(
        "transcript",
        "omniflow/msg/Transcript",
        EVENTS,
        "fusion",
        "what the user said: partials, then the final text",
    ),
    TopicSpec(
        "associations",
        "omniflow/msg/Association",
        EVENTS,
        "fusion",
        "which frames joined the context of each utterance (at its onset by time, then by "
        "the words of its final: a named object, or the one pointed at), and why",
    ),
    TopicSpec(
        "voice_activity",
        "omniflow/msg/VoiceActivity",
        EVENTS,
        "fusion",
        "the user's speech events with the robot's echo removed",
    ),
    TopicSpec(
        "scene",
        "omniflow/msg/Scene",
        EVENTS,
        "fusion",
        "each encoded frame in words, and whether a person is in view",
    ),
    TopicSpec(
        "user_said",
        "omniflow/msg/Transcript",
        EVENTS,
        "dialogue",
        "each utterance that starts a turn or asks the robot to stop",
    ),
    TopicSpec(
        "response",
        "omniflow/msg/ResponseChunk",
        KEPT_EVENTS,
        "dialogue",
        "the answer, streamed piece by piece; a speech node that joins late hears the turn "
        "in progress from its first piece",
    ),
    TopicSpec(
        "dialogue_state",
        "omniflow/msg/DialogueState",
        LATCHED,
        "dialogue",
        "listening, user speaking, thinking, speaking, interrupted",
    ),
    TopicSpec(
        "speech_state",
        "omniflow/msg/SpeechState",
        LATCHED,
        "speech",
        "speaking or idle, turn, phrase",
    ),
    TopicSpec(
        "played_audio",
        "omniflow/msg/AudioChunk",
        SENSOR_DATA,
        "speech",
        "every block sent to the speaker: the echo reference",
    ),
    TopicSpec(
        "power_state",
        "omniflow/msg/PowerState",
        LATCHED,
        "power_manager",
        "power mode and the readings behind it",
    ),
)
# What a recorded session must hold to be replayed through the graph.
INPUT_TOPICS = ("audio", "image_raw")
# Published by the bag player for use_sim_time (absolute name, rosgraph_msgs/msg/Clock).
CLOCK_TOPIC = "/clock"


def topic(name: str) -> TopicSpec:
    """The graph's topic of that (relative) name; ConfigError naming the known ones."""
    for spec in TOPICS:
        if spec.name == name:
            return spec
    raise ConfigError(
        f"unknown topic {name!r}; the graph's topics: {', '.join(spec.name for spec in TOPICS)}"
    )


def graph_topic_name(name: str) -> str:
    """The graph's relative name for a recorded topic name: ``/audio`` and ``/robot1/audio``
    (as ``ros2 bag record`` writes them) are ``audio``; other names are returned unchanged."""
    for spec in sorted(TOPICS, key=lambda s: -len(s.name)):
        if name == spec.name or name.endswith("/" + spec.name):
            return spec.name
    return name


def topics_of(nodes: tuple[str, ...]) -> tuple[TopicSpec, ...]:
    """The topics published by these nodes, in table order."""
    return tuple(spec for spec in TOPICS if spec.publisher in nodes)


def output_topics(nodes: tuple[str, ...] = GRAPH_NODES) -> tuple[TopicSpec, ...]:
    """What the graph produces from its inputs (everything but the capture topics)."""
    return tuple(spec for spec in topics_of(nodes) if spec.name not in INPUT_TOPICS)


@dataclass(frozen=True)
class Profile:
    """One way to run the graph: its nodes, YAML file (under ``config/``), whether nodes use
    /clock, and topic remappings by node name."""

    name: str
    params_file: str
    nodes: tuple[str, ...]
    use_sim_time: bool = False
    description: str = ""
    remappings: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


# Replay feeds the bag's audio and frames in place of the capture nodes, on /clock.
PROFILES = {
    "pc": Profile(
        "pc",
        "robot.yaml",
        GRAPH_NODES,
        description="robot PC: default microphone, /dev/video0, default speaker",
    ),
    "pi": Profile(
        "pi",
        "pi.yaml",
        GRAPH_NODES,
        description="Raspberry Pi 5 + Coral: USB microphone, Camera Module",
    ),
    "replay": Profile(
        "replay",
        "replay.yaml",
        tuple(n for n in GRAPH_NODES if n not in CAPTURE_NODES),
        use_sim_time=True,
        description="a recorded bag in place of the capture nodes, on /clock",
        # The recorded microphone holds the echo of what was played when it was
        # recorded (the bag's played_audio), not of what is played now: the live
        # speech node's blocks must not reach the echo stage as its reference.
        remappings={"speech": {"played_audio": "replay/played_audio"}},
    ),
}


# The graph over two hosts (docs/hardware.md): capture, fusion, speech and the power manager on
# the robot, the dialogue node (its LLM, or the remote backend) on a second machine on the same
# ROS_DOMAIN_ID. Stamps cross the link: both clocks must agree (chrony or PTP).
PROFILES["split-robot"] = Profile(
    "split-robot",
    "split_robot.yaml",
    tuple(n for n in GRAPH_NODES if n != "dialogue"),
    description="the robot's half of a graph over two hosts: capture, fusion, speech, power",
)
PROFILES["split-dialogue"] = Profile(
    "split-dialogue",
    "split_dialogue.yaml",
    ("dialogue",),
    description="the second host's half of a graph over two hosts: the dialogue node",
)


def profile(name: str) -> Profile:
    """The profile of that name; ConfigError naming the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(
            f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}"
        ) from None


@dataclass(frozen=True)
class LaunchNode:
    """What a launch file (or ``omniflow run``) starts for one node."""

    name: str
    executable: str
    params_files: tuple[str, ...]
    use_sim_time: bool
    respawn: bool
    respawn_delay: float
    env: Mapping[str, str]
    remappings: Mapping[str, str] = field(default_factory=dict)


def launch_nodes(
    profile_name: str,
    share_dir: str,
    params_file: str | None = None,
    camera_env: Mapping[str, str] | None = None,
) -> list[LaunchNode]:
    """The nodes of a profile as launch actions need them: executable, parameter files (the
    profile's YAML, or ``params_file`` in its place), use_sim_time, respawn,
    the camera's DDS profile (``camera_env``; default :func:`frame_publisher_env`), the
    fusion node's (:func:`frame_receiver_env`) and the malloc arenas (:func:`node_env`)."""
    chosen = profile(profile_name)
    files = (params_file or os.path.join(share_dir, "config", chosen.params_file),)
    envs = {
        "camera": frame_publisher_env(share_dir) if camera_env is None else dict(camera_env),
        "fusion": frame_receiver_env(share_dir),
    }
    return [
        LaunchNode(
            name=name,
            executable=name,
            params_files=files,
            use_sim_time=chosen.use_sim_time,
            respawn=True,
            respawn_delay=RESPAWN_DELAY_S,
            env=node_env(name, envs.get(name)),
            remappings=dict(chosen.remappings.get(name, {})),
        )
        for name in chosen.nodes
    ]


def launch_node_actions(
    profile_name: str,
    share_dir: str,
    *,
    namespace: str = "",
    use_sim_time: bool = False,
    log_level: str = "info",
    params_file: str | None = None,
    camera_dds_profile: str = "",
    vision_accelerator: str = "",
) -> list[dict[str, object]]:
    """The keyword arguments of a launch_ros ``Node`` for each node of a profile, from the
    values of the base launch file's arguments (:func:`base_arguments`): namespace, log level,
    use_sim_time (the profile's, or the argument), respawn, the camera's DDS
    profile (``camera_dds_profile``; empty: the package's large-frames profile) and the fusion
    node's ``vision.accelerator`` (``vision_accelerator``; empty: the parameters file's).

    Each node's parameters are its sections of the parameters file (:func:`node_parameters`),
    read here rather than passed as the file: ROS matches a file's ``audio_capture:`` key
    to ``/audio_capture`` only, so under ``namespace:=robot1`` every parameter of the file
    was silently left out."""
    camera_env = {
        DDS_PROFILE_VARIABLE: camera_dds_profile
        or os.path.join(share_dir, *FRAME_PUBLISHER_PROFILE)
    }
    nodes = launch_nodes(
        profile_name, share_dir, params_file=params_file or None, camera_env=camera_env
    )
    from_file = {
        path: node_parameters(path, tuple(n.name for n in nodes), namespace)
        for path in {file for node in nodes for file in node.params_files}
    }
    return [
        dict(
            package="omniflow",
            executable=node.executable,
            name=node.name,
            namespace=namespace,
            output="screen",
            respawn=node.respawn,
            respawn_delay=node.respawn_delay,
            parameters=[
                *(from_file[path][node.name] for path in node.params_files),
                {
                    "use_sim_time": node.use_sim_time or use_sim_time,
                    **(
                        {"vision.accelerator": vision_accelerator}
                        if vision_accelerator and node.name == "fusion"
                        else {}
                    ),
                },
            ],
            arguments=["--ros-args", "--log-level", log_level, "--enclave", enclave(node.name)],
            remappings=list(node.remappings.items()),
            additional_env=dict(node.env) or None,
        )
        for node in nodes
    ]


def enclave(node_name: str) -> str:
    """The SROS2 enclave a node of the graph runs in, ``/omniflow/<node>``: both ``omniflow run``
    and the launch files pass it (``--ros-args --enclave``). It only matters with
    ROS_SECURITY_ENABLE=true, when rcl loads the node's keys from that enclave of
    ROS_SECURITY_KEYSTORE (or from ROS_SECURITY_ENCLAVE_OVERRIDE's, which the nodes inherit)."""
    return f"{ENCLAVE_ROOT}/{node_name}"


def node_parameters(
    path: str, names: tuple[str, ...], namespace: str = ""
) -> dict[str, dict[str, object]]:
    """Each named node's parameters from a ROS 2 parameters file, whatever the namespace the
    node runs in: its sections ``/**``, ``/**/<name>``, ``<name>`` and ``<namespace>/<name>``
    (in that order, later values over earlier). ConfigError when the file cannot be read."""
    import yaml

    try:
        with open(path, encoding="utf-8") as stream:
            sections = yaml.safe_load(stream) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read parameters file {path}: {err}") from err
    if not isinstance(sections, dict):
        raise ConfigError(f"parameters file {path}: expected sections keyed by node name")
    merged: dict[str, dict[str, object]] = {}
    for name in names:
        values: dict[str, object] = {}
        full = f"/{namespace.strip('/')}/{name}" if namespace.strip("/") else None
        for key in ("/**", f"/**/{name}", name, full):
            section = sections.get(key) if key else None
            values.update((section or {}).get("ros__parameters") or {})
        merged[name] = values
    return merged


@dataclass(frozen=True)
class LaunchArgument:
    """One argument a launch file declares: its default (None: the argument is required),
    description and allowed values (empty: any)."""

    name: str
    default: str | None
    description: str
    choices: tuple[str, ...] = ()


def standard_arguments(profile_name: str | None = None) -> tuple[LaunchArgument, ...]:
    """The arguments every launch file declares (and a profile's file passes on to the base):
    namespace, use_sim_time, params_file, log_level and vision_accelerator. With a profile,
    use_sim_time defaults to the profile's and params_file names the profile's YAML."""
    if profile_name is None:
        sim_time = False
        own = ", ".join(f"config/{p.params_file}" for p in PROFILES.values())
        yaml_file = f"the profile's own ({own})"
    else:
        chosen = profile(profile_name)
        sim_time, yaml_file = chosen.use_sim_time, f"config/{chosen.params_file}"
    return (
        LaunchArgument("namespace", "", "Namespace of every node"),
        LaunchArgument(
            "use_sim_time",
            str(sim_time).lower(),
            "Use /clock (published by a bag player) instead of the system clock",
        ),
        LaunchArgument(
            "params_file", "", f"YAML parameters keyed by node name; empty: {yaml_file}"
        ),
        LaunchArgument("log_level", "info", "Logging level: debug, info, warn, error"),
        LaunchArgument(
            "vision_accelerator",
            "",
            "Where fusion's object detector runs: auto (the Coral when present, else the "
            "CPU), edgetpu (the Coral or fail) or cpu; empty: the parameters file's "
            "vision.accelerator",
            choices=("", *ACCELERATORS),
        ),
    )


def base_arguments() -> tuple[LaunchArgument, ...]:
    """The arguments of the base launch file (``omniflow.launch.py``): the profile, the
    standard ones, and the camera process's Fast DDS profile."""
    return (
        LaunchArgument(
            "profile",
            "pc",
            "Which nodes run: pc, pi, or replay (no capture)",
            choices=tuple(PROFILES),
        ),
        *standard_arguments(),
        LaunchArgument(
            "camera_dds_profile",
            "",
            "Fast DDS profile of the camera process; empty: "
            f"{'/'.join(FRAME_PUBLISHER_PROFILE)} (16 MiB shared memory: full-HD "
            "frames in ~9 ms instead of ~21 ms, none lost best effort)",
        ),
    )


def node_env(name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A node process's environment beside the user's: ``extra`` (the DDS profiles), and one
    malloc arena for the nodes of :data:`ONE_ARENA_NODES` unless the user chose a number."""
    env = dict(extra or {})
    if name in ONE_ARENA_NODES and MALLOC_ARENAS_VARIABLE not in os.environ:
        env[MALLOC_ARENAS_VARIABLE] = "1"
    return env


def _dds_profile_env(share_dir: str, parts: tuple[str, ...]) -> dict[str, str]:
    if DDS_PROFILE_VARIABLE in os.environ:
        return {}
    return {DDS_PROFILE_VARIABLE: os.path.join(share_dir, *parts)}


def frame_publisher_env(share_dir: str) -> dict[str, str]:
    """Environment for a node publishing camera frames: the large-frames profile, unless the
    user already chose a Fast DDS profile."""
    return _dds_profile_env(share_dir, FRAME_PUBLISHER_PROFILE)


def frame_receiver_env(share_dir: str) -> dict[str, str]:
    """Environment for the node receiving camera frames beside audio (fusion): the
    frame-receiver profile, unless the user already chose a Fast DDS profile."""
    return _dds_profile_env(share_dir, FRAME_RECEIVER_PROFILE)


def graph_nodes(
    names: tuple[str, ...] = GRAPH_NODES,
    namespace: str = "",
    overrides: Mapping[str, Mapping[str, object]] | None = None,
    log_level: str = "info",
    camera_env: Mapping[str, str] | None = None,
    remappings: Mapping[str, Mapping[str, str]] | None = None,
    fusion_env: Mapping[str, str] | None = None,
) -> list[NodeSpec]:
    """The named nodes, with per-node parameter overrides and topic remappings by node name,
    and extra environment for the camera and fusion processes (see
    :func:`frame_publisher_env`, :func:`frame_receiver_env`) beside :func:`node_env`'s."""
    overrides = overrides or {}
    remappings = remappings or {}
    envs = {"camera": dict(camera_env or {}), "fusion": dict(fusion_env or {})}
    return [
        NodeSpec(
            module=f"omniflow.nodes.{name}",
            name=name,
            parameters=dict(overrides.get(name, {})),
            namespace=namespace,
            log_level=log_level,
            env=node_env(name, envs.get(name)),
            remappings=dict(remappings.get(name, {})),
            enclave=enclave(name),
        )
        for name in names
    ]


def profile_nodes(
    profile_name: str,
    share_dir: str,
    namespace: str = "",
    overrides: Mapping[str, Mapping[str, object]] | None = None,
    log_level: str = "info",
    params_file: str | None = None,
) -> list[NodeSpec]:
    """A profile's nodes as child processes (``omniflow run``): the profile's YAML section of
    each node, then ``overrides``, then use_sim_time; the camera and fusion with their DDS
    profiles."""
    chosen = profile(profile_name)
    path = params_file or os.path.join(share_dir, "config", chosen.params_file)
    merged = node_parameters(path, chosen.nodes, namespace)
    for name, values in merged.items():
        values.update((overrides or {}).get(name, {}))
        if chosen.use_sim_time:
            values["use_sim_time"] = True
    return graph_nodes(
        chosen.nodes,
        namespace,
        merged,
        log_level,
        camera_env=frame_publisher_env(share_dir),
        remappings=chosen.remappings,
        fusion_env=frame_receiver_env(share_dir),
    )


def sample_overrides(audio_path: str, video_path: str) -> dict[str, dict[str, object]]:
    """Parameters that run the sensor nodes on recorded files instead of devices."""
    return {
        "audio_capture": {"source": "file", "file.path": audio_path, "file.loop": True},
        "camera": {"source": "video", "path": video_path, "fps": 15.0},
    }


_QOS_TEXT = {
    SENSOR_DATA: "sensor data (best effort, last 5)",
    LATCHED: "latched (reliable, transient local, depth 1)",
    EVENTS: "events (reliable, last 50)",
    KEPT_EVENTS: "kept events (reliable, transient local, last 50)",
}


def topic_table() -> str:
    """The graph's topics as a Markdown table (embedded in the README; a test compares)."""
    rows = ["| topic | type | QoS | published by | what |", "|---|---|---|---|---|"]
    for spec in TOPICS:
        kind = f"`{spec.msg_type.replace('/msg/', '/')}`" if spec.msg_type else "(the node's)"
        rows.append(
            f"| `{spec.name}` | {kind} | {_QOS_TEXT[spec.qos]} | {spec.publisher} | "
            f"{spec.description} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(f"<!-- topics -->\n{topic_table()}\n<!-- /topics -->")
