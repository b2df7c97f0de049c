"""Upstream ROS 2 Jazzy sources for the tests: ``launch``, ``launch_ros``, ``ros2launch``,
``message_filters``, ``composition_interfaces`` ... are not on PyPI, so tests that need them
use a ROS install's, else the unchanged sources in ``shared/vendor/ros-jazzy`` beside the
checkout (or beside one of its parents, for a worktree), and skip with the reason when
neither is there. Tests only: the product never imports from the shared directory, and
nothing is built into it (it may be read-only): builds go to this checkout's ``build/``.

Importable from every test module (pytest puts ``test/``, the directory of the top
``conftest.py``, on ``sys.path``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ("shared", "vendor", "ros-jazzy")


def vendored(package: str) -> Path | None:
    """The directory of a vendored package's sources (``.../ros-jazzy/<package>``, holding its
    Python package or its CMakeLists.txt), or None when no shared directory has it."""
    for parent in ROOT.parents:
        path = parent.joinpath(*VENDOR, package)
        if path.is_dir():
            return path
    return None


def require(package: str, why: str = "") -> Path:
    """:func:`vendored`, or skip the test saying what is missing."""
    path = vendored(package)
    if path is None:
        pytest.skip(
            f"../{'/'.join(VENDOR)}/{package} (the upstream Jazzy sources) is absent"
            + (f": {why}" if why else "")
        )
    return path
