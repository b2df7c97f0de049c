"""Declare a node's parameters from :class:`omniflow.core.params.ParamSpec` tuples.

Every parameter gets a ParameterDescriptor with its description, unit, range and, for
strings, the allowed values. One on-set callback validates each new value against its spec,
at start-up (rclpy calls it while declaring, so a bad override stops the node with a message
naming what is allowed) and on every later set (the old value stays and the caller gets the
reason). Nodes add their own hook to apply live changes or to refuse them in some states.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence

import yaml
from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from omniflow.core.params import ParamSpec, params_files, section_problems, unknown_names

# Return a reason to refuse the change, or None to accept it.
ApplyHook = Callable[[dict[str, object]], str | None]


def descriptor_for(spec: ParamSpec) -> ParameterDescriptor:
    """The ROS descriptor for one spec (description, read-only flag, numeric range)."""
    descriptor = ParameterDescriptor(
        name=spec.name, description=spec.full_description, read_only=spec.read_only
    )
    if spec.minimum is not None and spec.maximum is not None:
        if isinstance(spec.default, bool):
            pass
        elif isinstance(spec.default, int):
            descriptor.integer_range = [
                IntegerRange(from_value=int(spec.minimum), to_value=int(spec.maximum), step=0)
            ]
        elif isinstance(spec.default, float):
            descriptor.floating_point_range = [
                FloatingPointRange(
                    from_value=float(spec.minimum), to_value=float(spec.maximum), step=0.0
                )
            ]
    return descriptor


def declare_parameters(
    node: Node, specs: Iterable[ParamSpec], apply: ApplyHook | None = None
) -> list[str]:
    """Declare every spec on ``node`` with validation; ``apply`` sees accepted live changes.
    Returns what :func:`warn_unknown_overrides` found wrong with the parameters given.

    Raises rclpy's InvalidParameterValueException (whose text carries our reason) when a
    start-up override is not allowed.
    """
    specs = tuple(specs)
    by_name = {spec.name: spec for spec in specs}
    declared = False

    def on_set(parameters: list[Parameter]) -> SetParametersResult:
        changes = {}
        for parameter in parameters:
            spec = by_name.get(parameter.name)
            if spec is None:
                continue
            error = spec.check(parameter.value)
            if error:
                return SetParametersResult(
                    successful=False, reason=f"parameter '{parameter.name}': {error}"
                )
            changes[parameter.name] = parameter.value
        if declared and apply is not None and changes:
            reason = apply(changes)
            if reason:
                return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(on_set)
    for spec in specs:
        node.declare_parameter(spec.name, spec.default, descriptor_for(spec))
    declared = True
    return warn_unknown_overrides(node, specs)


def warn_unknown_overrides(
    node: Node, specs: Iterable[ParamSpec], argv: Sequence[str] | None = None
) -> list[str]:
    """Log one warning naming every start-up override (a parameters file, ``-p``) that is
    not a parameter of ``node``, with the closest known name, and one for each parameters
    file on the command line (``argv``, default ``sys.argv``) none of whose sections applies
    to the node; returns the messages.

    rclpy keeps the overrides it was given for this node in ``_parameter_overrides`` (no
    public accessor in Jazzy); names it declares itself are read from the node.
    """
    given = getattr(node, "_parameter_overrides", {})
    own = [name for name in given if node.has_parameter(name)]
    problems = unknown_names(specs, given, known_elsewhere=own)
    logger = node.get_logger()
    if problems:
        logger.warning(
            "unknown parameters ignored: "
            + "; ".join(problems)
            + ". Check the parameters file against `ros2 param describe` or docs/nodes.md"
        )
    for path in params_files(sys.argv if argv is None else argv):
        for problem in section_problems(_sections(path), node.get_fully_qualified_name(), path):
            logger.warning(f"parameters ignored: {problem}")
            problems.append(problem)
    return problems


def _sections(path: str) -> list[str]:
    """The top-level keys of a parameters file (rcl has already refused one it cannot
    parse, so an unreadable file here has no sections to check)."""
    try:
        with open(path, encoding="utf-8") as stream:
            content = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError):
        return []
    return [str(key) for key in content] if isinstance(content, dict) else []


def parameter_values(node: Node, specs: Iterable[ParamSpec]) -> dict[str, object]:
    """The current value of every spec's parameter, by name."""
    return {spec.name: node.get_parameter(spec.name).value for spec in specs}
