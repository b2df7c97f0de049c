"""Start omniflow nodes as child processes, each with its parameters in a YAML file.

Used by the demo and the integration tests where ``ros2 launch`` is not available (it is
not on PyPI). Parameters go through ``--params-file`` rather than ``-p name:=value`` so their
types survive (``-p device:=0`` would turn the string "0" into an integer). No ROS imports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# How long a node gets to shut down cleanly after SIGINT, then after SIGTERM.
_STOP_TIMEOUT_S = 5.0


@dataclass
class NodeSpec:
    """One node to run: its module (with a ``main``), name, parameters and remappings."""

    module: str
    name: str
    parameters: Mapping[str, object] = field(default_factory=dict)
    remappings: Mapping[str, str] = field(default_factory=dict)
    namespace: str = ""
    log_level: str = "info"
    env: Mapping[str, str] = field(default_factory=dict)
    # The node's ROS 2 security enclave (``--enclave``); empty: the context's default, "/".
    enclave: str = ""

    @property
    def executable(self) -> str:
        """The installed executable (``lib/omniflow/<name>``) that runs this module."""
        return self.module.rsplit(".", 1)[-1]

    def params_yaml(self) -> str:
        """The parameters as a ROS 2 params file; the file is this process's alone, so its
        parameters apply to whatever the node is named and namespaced (``/**``)."""
        return yaml.safe_dump({"/**": {"ros__parameters": dict(self.parameters)}}, sort_keys=True)

    def argv(self, params_file: Path) -> list[str]:
        """The command line that runs this node."""
        argv = [
            sys.executable,
            "-m",
            self.module,
            "--ros-args",
            "-r",
            f"__node:={self.name}",
            "--params-file",
            str(params_file),
            "--log-level",
            self.log_level,
        ]
        if self.enclave:
            argv += ["--enclave", self.enclave]
        if self.namespace.strip("/"):  # rcl refuses "robot1": it must be fully qualified
            argv += ["-r", f"__ns:=/{self.namespace.strip('/')}"]
        for source, target in self.remappings.items():
            argv += ["-r", f"{source}:={target}"]
        return argv


class NodeProcess:
    """A running node process whose output is kept in a file for later inspection."""

    def __init__(self, spec: NodeSpec, env: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self._dir = tempfile.TemporaryDirectory(prefix=f"omniflow-{spec.name}-")
        workdir = Path(self._dir.name)
        params_file = workdir / "params.yaml"
        params_file.write_text(spec.params_yaml(), encoding="utf-8")
        self._log_path = workdir / "output.log"
        self._log = self._log_path.open("wb")
        self.process = subprocess.Popen(
            spec.argv(params_file),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **spec.env, **(env or {}), "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        """Everything the node printed so far (the child writes the file directly)."""
        return self._log_path.read_text(encoding="utf-8", errors="replace")

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit by itself; raises subprocess.TimeoutExpired."""
        return self.process.wait(timeout)

    def stop(self) -> int:
        """Interrupt the node (as Ctrl-C would), escalating if it does not exit in time."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if not self.running:
                break
            self.process.send_signal(sig)
            try:
                self.process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                continue
        code = self.process.wait(_STOP_TIMEOUT_S)
        self._log.close()
        return code

    def close(self) -> None:
        """Stop the node and delete its files."""
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> NodeProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Supervisor:
    """Runs node processes and starts again, ``respawn_delay_s`` after it exits, each one whose
    name is in ``respawn`` (what ``respawn=True`` does in a launch file). Call :meth:`poll`
    regularly; ``report`` gets one line per exit and per respawn."""

    def __init__(
        self,
        specs: list[NodeSpec],
        respawn: set[str] | frozenset[str],
        respawn_delay_s: float,
        report=print,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._respawn = set(respawn)
        self._delay_s = respawn_delay_s
        self._report = report
        self._env = env
        self._died_at: dict[str, float] = {}
        self.respawns: dict[str, int] = {spec.name: 0 for spec in specs}
        self.processes: dict[str, NodeProcess] = {}
        for spec in specs:
            self.processes[spec.name] = NodeProcess(spec, env)

    def poll(self, now: float | None = None) -> None:
        """Report processes that exited; restart those due for a respawn."""
        import time

        now = time.monotonic() if now is None else now
        for name, process in list(self.processes.items()):
            if process.running:
                continue
            if name not in self._died_at:
                self._died_at[name] = now
                tail = "\n".join(process.output().splitlines()[-10:])
                again = f"; respawning in {self._delay_s:g} s" if name in self._respawn else ""
                self._report(f"{name} exited with {process.process.returncode}{again}:\n{tail}")
            elif name in self._respawn and now - self._died_at[name] >= self._delay_s:
                process.close()
                self.processes[name] = NodeProcess(process.spec, self._env)
                self.respawns[name] += 1
                del self._died_at[name]
                self._report(f"respawned {name}")

    def close(self) -> None:
        """Stop every process (Ctrl-C first, as NodeProcess.stop escalates)."""
        for process in self.processes.values():
            process.close()
