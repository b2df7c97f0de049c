"""The package's layering, read from the source (tier 0: no import is executed).

    core/             pure logic: no ROS, no other layer of omniflow, no I/O modules
    devices/, engines/  hardware and models: no ROS
    ros/              the ROS adapters shared by the nodes
    nodes/            thin ROS nodes, imported only by the entry points

Every ``import`` and ``from ... import`` counts, wherever it is written (inside functions and
``TYPE_CHECKING`` blocks too), and so does a call of the builtin ``open`` in the core. A failure
names the module, the line, the import and the rule.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "src" / "omniflow"

# Distributions of the ROS 2 client library, its tooling and its interfaces (besides every
# *_msgs, *_srvs and *_interfaces package, matched by suffix).
ROS_PACKAGES = frozenset(
    {
        "rclpy",
        "rcl",
        "rmw",
        "rosidl_runtime_py",
        "rosidl_parser",
        "rosidl_generator_py",
        "launch",
        "launch_ros",
        "ament_index_python",
        "rosbag2_py",
        "message_filters",
        "tf2_ros",
        "builtin_interfaces",
        "lifecycle_msgs",
        "rpyutils",
    }
)
ROS_SUFFIXES = ("_msgs", "_srvs", "_interfaces")
# omniflow's own ROS side: generated interfaces, the adapters and the nodes.
OMNIFLOW_ROS = ("omniflow.msg", "omniflow.action", "omniflow.srv", "omniflow.ros", "omniflow.nodes")
# What the pure core may import of omniflow.
CORE_MAY_IMPORT = ("omniflow.core", "omniflow.errors")
# Standard-library and device modules that do I/O (processes, files, sockets, devices): the
# core takes text, numbers and arrays, and whoever reads them lives in devices/ or engines/.
IO_MODULES = frozenset(
    {
        "subprocess",
        "socket",
        "socketserver",
        "glob",
        "os",
        "shutil",
        "pathlib",
        "tempfile",
        "io",
        "select",
        "selectors",
        "signal",
        "ctypes",
        "mmap",
        "fcntl",
        "termios",
        "pty",
        "http",
        "urllib",
        "ftplib",
        "smtplib",
        "ssl",
        "sqlite3",
        "multiprocessing",
        "asyncio",
        "sounddevice",
        "soundfile",
        "picamera2",
        "requests",
    }
)
# Who may import omniflow.nodes: the nodes themselves, the entry points that start them
# (cli, launcher, graph), the parameter-table generator of the docs and the doctor (which
# reads their parameters) (tests and launch
# files are outside the package).
NODE_IMPORTERS = (
    "omniflow.nodes",
    "omniflow.cli",
    "omniflow.launcher",
    "omniflow.graph",
    "omniflow.docs",
    "omniflow.doctor",
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. omniflow.core.telemetry
    path: Path
    line: int
    imported: str  # the imported module, absolute, e.g. omniflow.devices.sysfs

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} ({self.module})"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[Import]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(module, path, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            # `from omniflow import nodes` imports omniflow.nodes: keep the submodule name.
            found += [
                Import(module, path, node.lineno, f"{source}.{alias.name}")
                if source == "omniflow"
                else Import(module, path, node.lineno, source)
                for alias in node.names
            ]
    return found


def _within(name: str, prefixes: tuple[str, ...] | frozenset[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_ros(name: str) -> bool:
    top = name.split(".")[0]
    return top in ROS_PACKAGES or top.endswith(ROS_SUFFIXES) or _within(name, OMNIFLOW_ROS)


def _package_imports(layer: str | None = None) -> list[Import]:
    base = PACKAGE / layer if layer else PACKAGE
    return [imp for path in sorted(base.rglob("*.py")) for imp in _imports(path)]


def _report(violations: list[str]) -> str:
    return f"{len(violations)} layering violation(s):\n  " + "\n  ".join(violations)


def test_the_core_imports_no_ros_no_other_layer_and_no_io_modules():
    violations = []
    for imp in _package_imports("core"):
        if _is_ros(imp.imported):
            violations.append(
                f"{imp.where()} imports {imp.imported}: core/ imports nothing "
                "of ROS (rclpy, message packages, omniflow.msg/ros/nodes)"
            )
        elif _within(imp.imported, ("omniflow",)) and not _within(imp.imported, CORE_MAY_IMPORT):
            violations.append(
                f"{imp.where()} imports {imp.imported}: core/ imports only "
                f"{' and '.join(CORE_MAY_IMPORT)} of omniflow (no devices/, "
                "engines/, ros/, nodes/)"
            )
        elif imp.imported.split(".")[0] in IO_MODULES:
            violations.append(
                f"{imp.where()} imports {imp.imported}: core/ does no I/O (the "
                "readers and writers belong in devices/ or engines/)"
            )
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "open"
            ):
                violations.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} "
                    f"({_module_name(path)}) calls open(): core/ does no I/O "
                    "(the readers and writers belong in devices/ or engines/)"
                )
    assert not violations, _report(violations)


@pytest.mark.parametrize("layer", ["devices", "engines"])
def test_devices_and_engines_import_no_ros(layer):
    violations = [
        f"{imp.where()} imports {imp.imported}: {layer}/ imports no ROS (rclpy, "
        "message packages, omniflow.msg/action/ros/nodes); a node adapts it"
        for imp in _package_imports(layer)
        if _is_ros(imp.imported)
    ]
    assert not violations, _report(violations)


def test_nodes_are_imported_only_by_the_entry_points():
    violations = [
        f"{imp.where()} imports {imp.imported}: omniflow.nodes is imported only by "
        f"{', '.join(NODE_IMPORTERS)} (and tests, launch files); move what is shared "
        "into core/ or ros/"
        for imp in _package_imports()
        if _within(imp.imported, ("omniflow.nodes",)) and not _within(imp.module, NODE_IMPORTERS)
    ]
    assert not violations, _report(violations)


@pytest.mark.parametrize(
    ("source", "imported", "rule"),
    [
        ("from omniflow.devices import sysfs\n", "omniflow.devices", "core/ imports only"),
        ("import subprocess\n", "subprocess", "core/ does no I/O"),
        ("from rclpy.node import Node\n", "rclpy.node", "nothing of ROS"),
        ("from ..ros import qos\n", "omniflow.ros", "nothing of ROS"),
        ("from omniflow import nodes\n", "omniflow.nodes", "nothing of ROS"),
        ("def f():\n    from std_msgs.msg import String\n", "std_msgs.msg", "nothing of ROS"),
        ("def f(p):\n    return open(p).read()\n", "", "calls open(): core/ does no I/O"),
    ],
)
def test_a_violation_is_reported_with_module_import_and_rule(
    monkeypatch, tmp_path, source, imported, rule
):
    core = tmp_path / "src" / "omniflow" / "core"
    core.mkdir(parents=True)
    (core / "bad.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "src" / "omniflow")
    with pytest.raises(AssertionError) as failure:
        test_the_core_imports_no_ros_no_other_layer_and_no_io_modules()
    message = str(failure.value)
    assert "src/omniflow/core/bad.py:" in message and "(omniflow.core.bad)" in message
    assert rule in message
    assert not imported or f"imports {imported}:" in message
