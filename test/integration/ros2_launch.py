"""``ros2 launch PACKAGE FILE [NAME:=VALUE ...]`` where ros2cli is not installed (it is not on
PyPI): the calls the command itself makes (``ros2launch.command.launch``), on the upstream
ros2launch API. Run by the launch tests in the environment of ``ros_launch.py``.

SIGINT gets Python's own handler back first. A test run started in the background by a
non-interactive shell (how CI runners start jobs) inherits SIGINT ignored, Python then never
sees it, and launch, which acts on the SIGINTs that Python sees, did not stop on Ctrl-C: the
tests waited 20 s each for it and escalated to SIGTERM. ``ros2 launch`` in a terminal has it."""

from __future__ import annotations

import signal
import sys

from ros2launch.api import get_share_file_path_from_package, launch_a_launch_file


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    package, file_name, *arguments = argv
    path = get_share_file_path_from_package(package_name=package, file_name=file_name)
    return launch_a_launch_file(
        launch_file_path=path, launch_file_arguments=arguments, noninteractive=True
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
