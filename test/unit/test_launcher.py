"""Tier 1 tests of omniflow.launcher: params files, command lines, and real child processes;
and of the launch files in ``launch/`` (over omniflow.bringup), built with ROS 2's launch.

The processes run tiny modules written to ``tmp_path`` (no ROS, no DDS), so they start in a
few tens of milliseconds.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

import ros_vendor
from omniflow import launcher
from omniflow.launcher import NodeProcess, NodeSpec

# --- NodeSpec.params_yaml ------------------------------------------------------------------


@pytest.mark.parametrize(
    "parameters",
    [
        {"device": "0"},  # -p device:=0 would have made this an integer
        {"device": "true", "name": "1.5", "empty": "", "null": "null"},
        {"loop": True, "compressed": False},
        {"fps": 15.0, "gain": 0.5, "tiny": 1e-7, "huge": 1e20, "negative": -2.25},
        {"width": 0, "height": 480, "big": 2**40},
        {"capture.chunk_ms": 40, "fusion.window.before_ms": 120},
        {},
    ],
)
def test_params_yaml_reads_back_with_the_same_values_and_types(parameters: dict) -> None:
    spec = NodeSpec(module="m", name="n", parameters=parameters)
    loaded = yaml.safe_load(spec.params_yaml())
    assert loaded == {"/**": {"ros__parameters": parameters}}
    values = loaded["/**"]["ros__parameters"]
    assert {k: type(v) for k, v in values.items()} == {k: type(v) for k, v in parameters.items()}


def test_params_yaml_quotes_a_numeric_string() -> None:
    text = NodeSpec(module="m", name="n", parameters={"device": "0"}).params_yaml()
    assert yaml.safe_load(text)["/**"]["ros__parameters"]["device"] == "0"
    assert "device: '0'" in text


def test_params_yaml_writes_a_float_with_a_decimal_point() -> None:
    text = NodeSpec(module="m", name="n", parameters={"fps": 15.0}).params_yaml()
    assert "fps: 15.0" in text  # ROS reads "15" as an integer and would reject it


# --- NodeSpec.argv -------------------------------------------------------------------------


def pairs(argv: list[str], flag: str) -> list[str]:
    """The values that follow each occurrence of ``flag``."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def test_argv_runs_the_module_with_name_params_file_and_log_level() -> None:
    spec = NodeSpec(module="omniflow.nodes.camera", name="front_camera", log_level="debug")
    argv = spec.argv(Path("/tmp/params.yaml"))
    assert argv[:3] == [sys.executable, "-m", "omniflow.nodes.camera"]
    assert argv[3] == "--ros-args"
    assert pairs(argv, "-r") == ["__node:=front_camera"]
    assert pairs(argv, "--params-file") == ["/tmp/params.yaml"]
    assert pairs(argv, "--log-level") == ["debug"]


def test_argv_adds_namespace_and_remappings() -> None:
    spec = NodeSpec(
        module="m",
        name="mic",
        namespace="/robot1",
        remappings={"audio": "mic/audio", "/diagnostics": "/diag"},
    )
    argv = spec.argv(Path("p.yaml"))
    assert pairs(argv, "-r") == [
        "__node:=mic",
        "__ns:=/robot1",
        "audio:=mic/audio",
        "/diagnostics:=/diag",
    ]
    assert argv.index("--ros-args") < argv.index("-r")


def test_argv_has_no_namespace_remap_without_a_namespace() -> None:
    argv = NodeSpec(module="m", name="n").argv(Path("p.yaml"))
    assert not any(arg.startswith("__ns:=") for arg in argv)
    assert pairs(argv, "--log-level") == ["info"]
    assert not any(a.startswith("__ns:=") for a in NodeSpec("m", "n", namespace="/").argv(Path()))


def test_argv_passes_the_enclave_when_there_is_one() -> None:
    assert "--enclave" not in NodeSpec(module="m", name="n").argv(Path("p.yaml"))
    argv = NodeSpec(module="m", name="n", enclave="/omniflow/n").argv(Path("p.yaml"))
    assert pairs(argv, "--enclave") == ["/omniflow/n"]


@pytest.mark.parametrize("namespace", ["robot1", "/robot1", "robot1/"])
def test_argv_qualifies_a_namespace_written_without_its_slash(namespace) -> None:
    """``omniflow run --namespace robot1``: rcl refuses ``__ns:=robot1`` and every node
    exited with "Namespace not remapped to a fully qualified name"."""
    argv = NodeSpec(module="m", name="n", namespace=namespace).argv(Path("p.yaml"))
    assert "__ns:=/robot1" in pairs(argv, "-r")


# --- NodeProcess ---------------------------------------------------------------------------

EXITS_3 = """
    import sys
    from pathlib import Path

    def main():
        print("argv:", " ".join(sys.argv[1:]))
        params = sys.argv[sys.argv.index("--params-file") + 1]
        print(Path(params).read_text())
        return 3

    if __name__ == "__main__":
        sys.exit(main())
"""

# Ignores the signals named in IGNORE (e.g. "SIGINT,SIGTERM"), says so, then sleeps.
SLEEPS = """
    import os
    import signal
    import time

    def main():
        for name in filter(None, os.environ.get("IGNORE", "").split(",")):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)

    if __name__ == "__main__":
        main()
"""


@pytest.fixture
def module_dir(tmp_path: Path) -> Path:
    """A directory with the test modules, to be put on the child's PYTHONPATH."""
    (tmp_path / "of_exits_3.py").write_text(textwrap.dedent(EXITS_3), encoding="utf-8")
    (tmp_path / "of_sleeps.py").write_text(textwrap.dedent(SLEEPS), encoding="utf-8")
    return tmp_path


@pytest.fixture
def start(module_dir: Path) -> Iterator[Callable[..., NodeProcess]]:
    """Start a test module as a NodeProcess; every process is closed after the test."""
    started: list[NodeProcess] = []

    def _start(module: str, parameters: dict | None = None, **env: str) -> NodeProcess:
        process = NodeProcess(
            NodeSpec(module=module, name="probe", parameters=parameters or {}),
            env={"PYTHONPATH": str(module_dir), **env},
        )
        started.append(process)
        return process

    yield _start
    for process in started:
        if process.running:
            process.process.kill()
        process.close()


def wait_for_output(process: NodeProcess, text: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.output():
        assert time.monotonic() < deadline, f"no {text!r} in {process.output()!r}"
        assert process.running, f"exited with {process.process.returncode}: {process.output()}"
        time.sleep(0.01)


def test_process_runs_the_module_and_keeps_its_output(start) -> None:
    process = start("of_exits_3", {"device": "0", "fps": 15.0})
    assert process.wait(timeout=5.0) == 3
    assert not process.running
    output = process.output()
    assert "argv: --ros-args -r __node:=probe --params-file" in output
    assert "device: '0'" in output
    assert "fps: 15.0" in output
    assert process.stop() == 3  # already exited: no signal, same code


def test_wait_raises_timeout_expired_while_running(start) -> None:
    process = start("of_sleeps")
    wait_for_output(process, "ready")
    assert process.running
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.05)
    assert process.running


def test_stop_interrupts_like_ctrl_c(start) -> None:
    process = start("of_sleeps")
    wait_for_output(process, "ready")
    began = time.monotonic()
    assert process.stop() == -signal.SIGINT
    assert time.monotonic() - began < 1.0
    assert not process.running


@pytest.mark.parametrize(
    ("ignored", "ended_by"),
    [("SIGINT", signal.SIGTERM), ("SIGINT,SIGTERM", signal.SIGKILL)],
)
def test_stop_escalates_when_the_process_ignores_signals(
    start, monkeypatch: pytest.MonkeyPatch, ignored: str, ended_by: signal.Signals
) -> None:
    # Shorten the grace period (5 s per signal) so the test stays fast.
    monkeypatch.setattr(launcher, "_STOP_TIMEOUT_S", 0.1)
    process = start("of_sleeps", IGNORE=ignored)
    wait_for_output(process, "ready")
    began = time.monotonic()
    assert process.stop() == -ended_by
    assert time.monotonic() - began < 2.0
    assert not process.running


def test_close_deletes_the_working_directory(start) -> None:
    process = start("of_exits_3")
    process.wait(timeout=5.0)
    workdir = Path(pairs(process.process.args, "--params-file")[0]).parent
    assert workdir.is_dir()
    process.close()
    assert not workdir.exists()


def test_context_manager_stops_the_process(module_dir: Path) -> None:
    spec = NodeSpec(module="of_sleeps", name="probe")
    with NodeProcess(spec, env={"PYTHONPATH": str(module_dir)}) as process:
        wait_for_output(process, "ready")
    assert not process.running


def test_output_is_readable_after_stop(start) -> None:
    process = start("of_sleeps")
    wait_for_output(process, "ready")
    process.stop()
    assert "ready" in process.output()


# --- the launch files, built with ROS 2's launch package -----------------------------------
# ``launch`` is not on PyPI: on a ROS install it is importable, otherwise its Jazzy sources
# from the shared vendor directory beside the checkout are used (skipped when absent).

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_DIR = ROOT / "launch"
STANDARD = ("namespace", "use_sim_time", "params_file", "log_level", "vision_accelerator")


@pytest.fixture(scope="module")
def ros_launch():
    """The ``launch`` package (ROS 2's, or the vendored Jazzy sources)."""
    try:
        import launch

        if getattr(launch, "__file__", None):  # not this checkout's launch/ directory
            return launch
    except ImportError:
        pass
    sys.modules.pop("launch", None)
    vendor = ros_vendor.require("launch", "ROS 2's launch package is not installed")
    sys.path.insert(0, str(vendor))
    try:
        import launch
    except ImportError as err:
        sys.path.remove(str(vendor))
        pytest.skip(
            f"cannot import the vendored launch package: {err} "
            "(osrf-pycommon is in requirements/dev.txt)"
        )
    return launch


def load_launch_file(name: str):
    """The launch description that ``launch/<name>`` generates (as ``ros2 launch`` loads it)."""
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), LAUNCH_DIR / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate_launch_description()


def declared(description) -> dict[str, object]:
    from launch.actions import DeclareLaunchArgument

    return {a.name: a for a in description.entities if isinstance(a, DeclareLaunchArgument)}


def performed(substitutions, context) -> str:
    from launch.utilities import normalize_to_list_of_substitutions, perform_substitutions

    return perform_substitutions(context, normalize_to_list_of_substitutions(substitutions))


@pytest.mark.parametrize(
    ("name", "profile", "sim_time", "extra"),
    [
        ("robot.launch.py", "pc", "false", ()),
        ("pi.launch.py", "pi", "false", ()),
        ("replay.launch.py", "replay", "true", ("bag", "rate")),
    ],
)
def test_profile_launch_files_declare_the_standard_arguments_and_include_the_base(
    ros_launch, name, profile, sim_time, extra
) -> None:
    from launch.actions import IncludeLaunchDescription

    description = load_launch_file(name)
    arguments = declared(description)
    assert tuple(arguments) == (*STANDARD, *extra)
    assert all(a.description for a in arguments.values())
    assert [
        performed(a.default_value, ros_launch.LaunchContext())
        for a in arguments.values()
        if a.name in STANDARD
    ] == ["", sim_time, "", "info", ""]
    (include,) = [e for e in description.entities if isinstance(e, IncludeLaunchDescription)]

    context = ros_launch.LaunchContext()
    context.extend_locals({"current_launch_file_directory": str(LAUNCH_DIR)})
    for argument in STANDARD:
        context.launch_configurations[argument] = f"value of {argument}"
    passed = {performed(k, context): performed(v, context) for k, v in include.launch_arguments}
    assert passed == {"profile": profile, **{a: f"value of {a}" for a in STANDARD}}
    source = include.launch_description_source
    base = source.get_launch_description(context)  # loads the file beside this one
    assert Path(source.location) == LAUNCH_DIR / "omniflow.launch.py"
    assert "profile" in declared(base)


def test_the_replay_launch_file_plays_the_bag_into_the_namespace(ros_launch) -> None:
    from launch.actions import ExecuteProcess

    (player,) = [
        e for e in load_launch_file("replay.launch.py").entities if isinstance(e, ExecuteProcess)
    ]
    context = ros_launch.LaunchContext()
    context.launch_configurations.update(bag="/b.mcap", rate="2.0", namespace="/r1")
    # By this interpreter, not by name on PATH (a venv's bin/ is not on it unless activated).
    assert [performed(part, context) for part in player.cmd] == [
        sys.executable,
        "-m",
        "omniflow.cli",
        "replay",
        "/b.mcap",
        "--clock",
        "--rate",
        "2.0",
        "--namespace",
        "/r1",
        "--with-graph",
    ]
    assert declared(load_launch_file("replay.launch.py"))["bag"].default_value is None


def test_the_base_launch_file_declares_its_arguments_then_starts_the_nodes(ros_launch) -> None:
    from launch.actions import OpaqueFunction

    description = load_launch_file("omniflow.launch.py")
    arguments = declared(description)
    assert tuple(arguments) == ("profile", *STANDARD, "camera_dds_profile")
    assert arguments["profile"].choices == ["pc", "pi", "replay", "split-robot", "split-dialogue"]
    defaults = {
        name: performed(a.default_value, ros_launch.LaunchContext())
        for name, a in arguments.items()
    }
    assert defaults == {
        "profile": "pc",
        "namespace": "",
        "use_sim_time": "false",
        "params_file": "",
        "log_level": "info",
        "vision_accelerator": "",
        "camera_dds_profile": "",
    }
    assert isinstance(description.entities[-1], OpaqueFunction)
