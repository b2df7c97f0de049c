"""Parameter specifications: the single place where each parameter's default lives.

A :class:`ParamSpec` names a parameter, its default, its description, and what values are
allowed. Nodes declare their parameters from a tuple of specs (see ``omniflow.ros.params``),
and the same specs validate values at start-up and on every later set, so a bad value is
rejected with a message that names what is allowed. No ROS imports here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from omniflow.errors import ConfigError

Value = bool | int | float | str

#: The values of the fusion node's ``vision.accelerator`` (engines/vision) and of the launch
#: argument that sets it (graph.py): written once here, where both can import it cheaply.
ACCELERATORS = ("auto", "edgetpu", "cpu")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: its name, default, meaning and allowed values.

    ``minimum``/``maximum`` bound numbers (inclusive); ``choices`` lists the allowed strings;
    When a value takes effect: ``live`` parameters at once, ``read_only`` ones only at start-up
    (a restart is needed), all others when a lifecycle node is next configured (the node
    refuses to change them while configured). ``unit`` is shown with the description.
    """

    name: str
    default: Value
    description: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = field(default_factory=tuple)
    read_only: bool = False
    live: bool = False

    def __post_init__(self) -> None:
        error = self.check(self.default)
        if error:
            raise ConfigError(f"default of parameter '{self.name}' is invalid: {error}")
        if self.read_only and self.live:
            raise ConfigError(f"parameter '{self.name}' cannot be both read-only and live")

    @property
    def full_description(self) -> str:
        """The description with unit, range and choices, as shown by ``ros2 param describe``."""
        parts = [self.description.rstrip(".") + "."]
        if self.unit:
            parts.append(f"Unit: {self.unit}.")
        if self.choices:
            parts.append(f"Allowed: {', '.join(self.choices)}.")
        if self.minimum is not None or self.maximum is not None:
            parts.append(f"Range: {_format_range(self.minimum, self.maximum)}.")
        if self.read_only:
            parts.append("Read at start-up; changing it needs a restart.")
        elif self.live:
            parts.append("Applied at once.")
        else:
            parts.append("Applied on configure.")
        return " ".join(parts)

    def check(self, value: object) -> str | None:
        """Return why ``value`` is not allowed, or None when it is."""
        expected = type(self.default)
        # bool is an int in Python: keep the two apart, and let an int stand for a float.
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not expected:
            return f"expected a {expected.__name__}, got {type(value).__name__} {value!r}"
        if self.choices and value not in self.choices:
            return f"{value!r} is not one of the allowed values: {', '.join(self.choices)}"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value != value:  # NaN
                return "NaN is not allowed"
            low, high = self.minimum, self.maximum
            if (low is not None and value < low) or (high is not None and value > high):
                return f"{value} is outside the allowed range {_format_range(low, high)}"
        return None


def _format_range(low: float | None, high: float | None) -> str:
    if low is None:
        return f"<= {high}"
    if high is None:
        return f">= {low}"
    return f"[{low}, {high}]"


def validate(specs: Iterable[ParamSpec], values: Mapping[str, object]) -> list[str]:
    """Check ``values`` against the specs they name; return one message per problem."""
    by_name = {spec.name: spec for spec in specs}
    problems = []
    for name, value in values.items():
        spec = by_name.get(name)
        if spec is None:
            continue
        error = spec.check(value)
        if error:
            problems.append(f"parameter '{name}': {error}")
    return problems


def defaults(specs: Iterable[ParamSpec]) -> dict[str, Value]:
    """The default value of every spec, by name."""
    return {spec.name: spec.default for spec in specs}


def unknown_names(
    specs: Iterable[ParamSpec], given: Iterable[str], known_elsewhere: Iterable[str] = ()
) -> list[str]:
    """One message per name in ``given`` that no spec declares (a typo in a parameters
    file is otherwise ignored in silence), naming the closest declared name if there is one.

    ``known_elsewhere`` are names the middleware itself declares (``use_sim_time``, ...);
    ``qos_overrides.`` entries belong to the middleware too.
    """
    declared = {spec.name for spec in specs}
    ignored = declared | set(known_elsewhere)
    messages = []
    for name in sorted(set(given) - ignored):
        if name.startswith("qos_overrides."):
            continue
        close = difflib.get_close_matches(name, sorted(declared), n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        messages.append(f"'{name}' is not a parameter of this node{hint}")
    return messages


def params_files(argv: Iterable[str]) -> list[str]:
    """The ``--params-file`` paths of a ROS command line (inside ``--ros-args`` ... ``--``)."""
    files, ros_args, expect = [], False, False
    for arg in argv:
        if expect:
            files.append(arg)
            expect = False
        elif arg == "--ros-args":
            ros_args = True
        elif arg == "--":
            ros_args = False
        elif ros_args and arg == "--params-file":
            expect = True
    return files


def section_applies(section: str, node_fqn: str) -> bool:
    """Whether a parameters file's section (a node name, possibly namespaced, with ``*`` for
    one name and ``**`` for any number of names) applies to the node named ``node_fqn``."""
    pattern = ""
    for part in section.strip("/").split("/"):
        if part == "**":
            pattern += "(/[^/]+)*"
        else:
            pattern += "/" + re.escape(part).replace(r"\*", "[^/]*")
    return re.fullmatch(pattern, node_fqn) is not None


def section_problems(sections: Iterable[str], node_fqn: str, source: str) -> list[str]:
    """What is wrong with a parameters file's sections for the node ``node_fqn``: none of
    them applies to it (a namespace left out, a misspelt node name: the whole file would be
    ignored in silence), naming the closest section and the names that would apply."""
    sections = [str(section) for section in sections]
    if not sections or any(section_applies(s, node_fqn) for s in sections):
        return []
    name = node_fqn.rsplit("/", 1)[-1]
    by_last = {s.strip("/").rsplit("/", 1)[-1]: s for s in sections}
    close = difflib.get_close_matches(name, list(by_last), n=1, cutoff=0.6)
    hint = ""
    if close and close[0] == name:
        hint = f" ('{by_last[name]}' has the node's name, in another namespace)"
    elif close:
        hint = f" ('{by_last[close[0]]}' is close to '{name}')"
    return [
        f"no section of {source} applies to this node ({node_fqn}): its sections are "
        f"{', '.join(repr(s) for s in sections)}{hint}; name it '{node_fqn}', '/**/{name}' "
        "or '/**'"
    ]
