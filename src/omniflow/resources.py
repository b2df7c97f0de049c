"""Where the installed package's shared files (samples, config, launch) are, and where it
caches the files it makes from them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE = "omniflow"


def share_dir() -> Path:
    """``share/omniflow`` of the install: from the ament index on a ROS system (a sourced
    workspace sets AMENT_PREFIX_PATH), else from this interpreter's prefix (a venv)."""
    if os.environ.get("AMENT_PREFIX_PATH"):
        from ament_index_python.packages import (
            PackageNotFoundError,
            get_package_share_directory,
        )

        try:
            return Path(get_package_share_directory(PACKAGE))
        except PackageNotFoundError:
            pass
    candidate = Path(sys.prefix) / "share" / PACKAGE
    if candidate.is_dir():
        return candidate
    raise FileNotFoundError(
        f"share/{PACKAGE} not found in AMENT_PREFIX_PATH nor under {sys.prefix}; "
        "build and install the package first (make setup, or colcon build and source "
        "install/setup.bash)"
    )


def sample(name: str) -> Path:
    """A bundled sample file (``share/omniflow/samples/<name>``)."""
    path = share_dir() / "samples" / name
    if not path.is_file():
        raise FileNotFoundError(f"bundled sample {path} is missing; reinstall the package")
    return path


def cache_dir() -> Path:
    """Where omniflow keeps files it makes once (an assembled model, a converted one):
    ``$XDG_CACHE_HOME/omniflow``, else ``~/.cache/omniflow``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / PACKAGE
