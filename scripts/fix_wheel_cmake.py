#!/usr/bin/env python3
"""Point the ROS 2 wheels' CMake export files at this interpreter's include directories.

The ``ros-jazzy-*`` wheels on PyPI are built in a manylinux container, and the CMake files
they install under ``<prefix>/share/**/cmake`` name that container's Python and numpy include
directories (``/opt/python/cp3XX-cp3XX/include/python3.XX`` and its numpy ``core/include``).
rosidl needs them to compile the Python type support of our own interfaces, so they are
rewritten to the directories of the interpreter running this script. Idempotent.

Usage: python scripts/fix_wheel_cmake.py PREFIX
"""

import argparse
import pathlib
import re
import sys
import sysconfig

import numpy

# The container's interpreter include dir, and its numpy include dir (before or after numpy 2).
_PYTHON_INCLUDE = re.compile(r"/opt/python/cp3\d+-cp3\d+/include/python3\.\d+t?")
_NUMPY_INCLUDE = re.compile(
    r"/opt/python/cp3\d+-cp3\d+/lib/python3\.\d+t?/site-packages/numpy/(?:_core|core)/include"
)


def fix_tree(prefix: pathlib.Path) -> int:
    """Rewrite every CMake file under ``prefix/share``; return how many files changed."""
    python_include = sysconfig.get_paths()["include"]
    numpy_include = numpy.get_include()
    changed = 0
    for path in (prefix / "share").rglob("*.cmake"):
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        fixed = _NUMPY_INCLUDE.sub(numpy_include, text)
        fixed = _PYTHON_INCLUDE.sub(python_include, fixed)
        if fixed != text:
            path.write_text(fixed, encoding="utf-8", errors="surrogateescape")
            changed += 1
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix", type=pathlib.Path, help="the virtual environment's prefix")
    args = parser.parse_args()
    if not (args.prefix / "share").is_dir():
        print(
            f"error: {args.prefix}/share does not exist; install the ROS 2 wheels first",
            file=sys.stderr,
        )
        return 1
    changed = fix_tree(args.prefix)
    print(f"fix_wheel_cmake: {changed} CMake file(s) rewritten under {args.prefix}/share")
    return 0


if __name__ == "__main__":
    sys.exit(main())
