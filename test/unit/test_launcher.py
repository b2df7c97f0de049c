"""Tier 1 tests of omniflow.launcher: params files, command lines, and real child processes.

The processes run tiny modules written to ``tmp_path`` (no ROS, no DDS), so they start in a
few tens of milliseconds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

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
    spec = NodeSpec(module="m", name="mic", namespace="/robot1",
                    remappings={"audio": "mic/audio", "/diagnostics": "/diag"})
    argv = spec.argv(Path("p.yaml"))
    assert pairs(argv, "-r") == ["__node:=mic", "__ns:=/robot1", "audio:=mic/audio",
                                 "/diagnostics:=/diag"]
    assert argv.index("--ros-args") < argv.index("-r")


def test_argv_has_no_namespace_remap_without_a_namespace() -> None:
    argv = NodeSpec(module="m", name="n").argv(Path("p.yaml"))
    assert not any(arg.startswith("__ns:=") for arg in argv)
    assert pairs(argv, "--log-level") == ["info"]


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
        process = NodeProcess(NodeSpec(module=module, name="probe", parameters=parameters or {}),
                              env={"PYTHONPATH": str(module_dir), **env})
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
