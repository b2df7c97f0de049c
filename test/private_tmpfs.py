"""A small tmpfs for a child process, mounted in a user and mount namespace of its own
(``unshare -rm``): a disk that really fills up, or a small /dev/shm, without root and without
touching the machine's file systems (other processes never see the mount). Skipped with the
reason where the kernel allows no user namespaces.

Importable from every test module (pytest puts ``test/`` on ``sys.path``).
"""

from __future__ import annotations

import functools
import shutil
import subprocess

import pytest


@functools.cache
def available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m omniflow_probe /mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


needs_private_tmpfs = pytest.mark.skipif(
    not available(), reason="no user namespace here to mount a small tmpfs in (unshare -rm)"
)


def command_on_tmpfs(mount_point: str, size_mb: float, command: list[str], after: str = ""):
    """``command`` run with a ``size_mb`` tmpfs on ``mount_point`` (created if missing);
    ``after``: a shell line run after it succeeds, in the namespace (the tmpfs goes with it:
    copy out what is to be kept)."""
    script = (
        'point=$1; shift; mkdir -p "$point" && '
        f'mount -t tmpfs -o size={int(size_mb * 1024)}k omniflow_test "$point" && "$@"'
        + (f" && {after}" if after else "")
    )
    return ["unshare", "-rm", "sh", "-c", script, "sh", mount_point, *command]
