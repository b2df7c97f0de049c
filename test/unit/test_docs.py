"""Tier 0: every command and path the README and the docs name exists.

Checked, with explicit patterns (anything else in the text is left alone):

- Markdown links to files of the repository, and their ``#anchors`` (GitHub's heading slugs);
- paths in inline code whose first part is a top-level entry of the repository
  (``config/pi.yaml``, ``benchmarks/echo.py``), ``omniflow/...`` paths (under ``src/``) and
  interface names (``omniflow/msg/AudioChunk`` -> ``msg/AudioChunk.msg``);
- in inline code and code blocks: ``make TARGET`` (a Makefile target), ``omniflow SUBCOMMAND``
  (a subcommand of ``omniflow.cli``), ``ros2 run omniflow EXE`` (an installed executable),
  ``ros2 launch omniflow FILE`` (a launch file), ``python -m omniflow.MODULE`` (a runnable
  module), ``benchmarks/*.py`` and ``scripts/*`` files;
- dotted names in inline code (``omniflow.graph.TOPICS``): the module exists and the name after
  it appears in its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SRC = ROOT / "src"
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "benchmarks" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "models").glob("*.md"),
    ]
)
# Top-level entries whose paths are checked when named (build/ and .venv/ are outputs).
TOP_LEVEL = (
    "action",
    "benchmarks",
    "config",
    "docs",
    "launch",
    "models",
    "msg",
    "requirements",
    "scripts",
    "src",
    "test",
    ".ci",
)
# Made by the build, not in the source tree.
GENERATED = {"omniflow/_version.py"}

INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")
MAKE = re.compile(r"(?:^|[\s;&|(])make\s+([A-Za-z][\w-]*)")
# not `ros2 run omniflow EXE` nor `ros2 launch omniflow FILE`
OMNIFLOW = re.compile(r"(?<!\brun)(?<!\blaunch)(?:^|[\s;&|(]|bin/)omniflow\s+([a-z][\w-]*)")
ROS2_RUN = re.compile(r"ros2\s+run\s+omniflow\s+([\w-]+)")
ROS2_LAUNCH = re.compile(r"ros2\s+launch\s+omniflow\s+([\w.-]+)")
PYTHON_M = re.compile(r"-m\s+(omniflow(?:\.\w+)+)")
SCRIPT = re.compile(r"(?<![\w/.])((?:benchmarks|scripts)/[\w/.-]+\.(?:py|sh))")
DOTTED = re.compile(r"^(omniflow(?:\.\w+)+)(?:\(\))?$")
PATH = re.compile(r"^[\w.~-]+(?:/[\w.-]+)*/?$")
FILE_SUFFIXES = (".py", ".md", ".yaml", ".xml", ".json", ".mcap", ".txt", ".sh", ".msg")


@dataclass(frozen=True)
class Span:
    """A piece of a document to check: its file, line, and whether it is code."""

    path: Path
    line: int
    text: str
    code_block: bool

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def spans(path: Path) -> list[Span]:
    """Code-block lines and prose lines of a Markdown file, with their line numbers."""
    out, in_block = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_block = not in_block
            continue
        out.append(Span(path, number, line, in_block))
    return out


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.MULTILINE))


def cli_subcommands() -> set[str]:
    return set(re.findall(r'add_parser\(\s*"([\w-]+)"', (SRC / "omniflow" / "cli.py").read_text()))


def node_executables() -> set[str]:
    return set(re.findall(r'"(\w+):omniflow\.nodes\.\w+"', (ROOT / "CMakeLists.txt").read_text()))


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {
        slug(line.lstrip("#"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }


def module_problem(dotted: str, runnable: bool = False) -> str | None:
    """Why ``dotted`` (``omniflow.pkg.module[.name]``) does not resolve, or None."""
    parts = dotted.split(".")
    here = SRC / parts[0]
    for index, part in enumerate(parts[1:], 1):
        if (here / part).is_dir():
            here = here / part
            continue
        if (here / f"{part}.py").is_file():
            source = here / f"{part}.py"
            rest = parts[index + 1 :]
            if runnable and rest:
                return f"{dotted}: {source.relative_to(ROOT)} is a module, not a package"
            if runnable and "__main__" not in source.read_text():
                return f"{dotted}: {source.relative_to(ROOT)} has no __main__ block"
            if rest and not re.search(rf"\b{re.escape(rest[0])}\b", source.read_text()):
                return f"{dotted}: no {rest[0]} in {source.relative_to(ROOT)}"
            return None
        init = here / "__init__.py"
        if (
            here.is_dir()
            and not runnable
            and init.is_file()
            and re.search(rf"\b{re.escape(part)}\b", init.read_text())
        ):
            return None
        return f"{dotted}: no module or package {part} in {here.relative_to(ROOT)}"
    if runnable and not (here / "__main__.py").is_file():
        return f"{dotted}: package {here.relative_to(ROOT)} has no __main__.py"
    return None


def path_problem(text: str) -> str | None:
    """Why an inline-code path of the repository does not exist, or None (also for text that
    is not such a path)."""
    if not PATH.match(text) or "/" not in text or text in GENERATED:
        return None
    parts = text.rstrip("/").split("/")
    if parts[0] == "omniflow":
        if len(parts) == 3 and parts[1] in ("msg", "action"):
            wanted = ROOT / parts[1] / f"{parts[2]}.{parts[1]}"
        elif len(parts) == 2 and not parts[1].endswith(FILE_SUFFIXES):
            return None  # a type name as `ros2 topic` prints it: omniflow/AudioChunk
        else:
            wanted = SRC.joinpath(*parts)
    elif parts[0] in TOP_LEVEL:
        wanted = ROOT.joinpath(*parts)
    else:
        return None
    if wanted.exists():
        return None
    shown = str(wanted.relative_to(ROOT))
    return (
        f"path {text} does not exist"
        if shown == text.rstrip("/")
        else f"path {text} ({shown}) does not exist"
    )


def problems_in(
    span: Span, makes: set[str], subcommands: set[str], executables: set[str]
) -> list[str]:
    found = []
    codes = [span.text] if span.code_block else INLINE_CODE.findall(span.text)
    for code in codes:
        for target in MAKE.findall(code):
            if target not in makes:
                found.append(f"make {target}: no such Makefile target")
        for sub in OMNIFLOW.findall(code):
            if sub not in subcommands:
                found.append(f"omniflow {sub}: no such subcommand in src/omniflow/cli.py")
        for exe in ROS2_RUN.findall(code):
            if exe not in executables:
                found.append(f"ros2 run omniflow {exe}: no such executable in CMakeLists.txt")
        for launch in ROS2_LAUNCH.findall(code):
            if not (ROOT / "launch" / launch).is_file():
                found.append(f"ros2 launch omniflow {launch}: no launch/{launch}")
        for module in PYTHON_M.findall(code):
            problem = module_problem(module, runnable=True)
            if problem:
                found.append(f"python -m {problem}")
        for script in SCRIPT.findall(code):
            if not (ROOT / script).is_file():
                found.append(f"path {script} does not exist")
        if not span.code_block:
            dotted = DOTTED.match(code.strip())
            if dotted and not code.strip().endswith(FILE_SUFFIXES):
                problem = module_problem(dotted.group(1))
                if problem:
                    found.append(problem)
            problem = path_problem(code.strip())
            if problem:
                found.append(problem)
    if not span.code_block:
        for target in LINK.findall(INLINE_CODE.sub("", span.text)):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            linked = (span.path.parent / file_part).resolve() if file_part else span.path
            if not linked.exists():
                found.append(f"link {target}: {file_part} does not exist")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                found.append(f"link {target}: no heading #{anchor} in {linked.name}")
    return list(dict.fromkeys(found))  # a path found by two patterns is named once


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_and_path_named_exists(doc):
    makes, subcommands, executables = makefile_targets(), cli_subcommands(), node_executables()
    problems = [
        f"{span.where()}: {problem}"
        for span in spans(doc)
        for problem in problems_in(span, makes, subcommands, executables)
    ]
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_they_are_for():
    doc = ROOT / "docs" / "probe.md"
    lines = [
        ("`make nothing-here` `omniflow fly` `config/none.yaml` `omniflow.graph.NOPE`", False),
        ("[gone](gone.md) [anchor](design.md#no-such-heading) `python -m omniflow.nope`", False),
        (
            "`ros2 run omniflow ghost` `benchmarks/none.py` `ros2 launch omniflow x.launch.py`",
            False,
        ),
        ("make nowhere && .venv/bin/omniflow fly2 && python benchmarks/none2.py", True),
        ("`make demo` `omniflow demo` `ros2 run omniflow camera` `omniflow.graph.TOPICS`", False),
        ("`ros2 launch omniflow pi.launch.py` `omniflow/msg/AudioChunk` `build/demo`", False),
    ]
    found = [
        problem
        for number, (line, code) in enumerate(lines, 1)
        for problem in problems_in(
            Span(doc, number, line, code), makefile_targets(), cli_subcommands(), node_executables()
        )
    ]
    expected = [
        "make nothing-here",
        "omniflow fly",
        "config/none.yaml",
        "no NOPE in src/omniflow/graph.py",
        "gone.md does not exist",
        "no heading #no-such-heading",
        "no module or package nope",
        "ros2 run omniflow ghost",
        "benchmarks/none.py",
        "launch/x.launch.py",
        "make nowhere",
        "omniflow fly2",
        "benchmarks/none2.py",
    ]
    assert len(found) == len(expected), found
    for text in expected:
        assert any(text in problem for problem in found), (text, found)
    assert makefile_targets() >= {"demo", "test", "setup", "bench", "golden"}
    assert {"run", "record", "replay", "demo"} <= cli_subcommands()
    assert len(node_executables()) == 6
