"""``ros2 launch PACKAGE FILE [NAME:=VALUE ...]`` where ros2cli is not installed (it is not on
PyPI): the calls the command itself makes (``ros2launch.command.launch``), on the upstream
ros2launch API. Run by the launch tests in the environment of ``ros_launch.py``."""

from __future__ import annotations

import sys

from ros2launch.api import get_share_file_path_from_package, launch_a_launch_file


def main(argv: list[str]) -> int:
    package, file_name, *arguments = argv
    path = get_share_file_path_from_package(package_name=package, file_name=file_name)
    return launch_a_launch_file(
        launch_file_path=path, launch_file_arguments=arguments, noninteractive=True
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
