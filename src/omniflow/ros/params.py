"""Declare a node's parameters from :class:`omniflow.core.params.ParamSpec` tuples.

Every parameter gets a ParameterDescriptor with its description, unit, range and, for
strings, the allowed values. One on-set callback validates each new value against its spec,
at start-up (rclpy calls it while declaring, so a bad override stops the node with a message
naming what is allowed) and on every later set (the old value stays and the caller gets the
reason). Nodes add their own hook to apply live changes or to refuse them in some states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from omniflow.core.params import ParamSpec, unknown_names

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
) -> None:
    """Declare every spec on ``node`` with validation; ``apply`` sees accepted live changes.

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
    warn_unknown_overrides(node, specs)


def warn_unknown_overrides(node: Node, specs: Iterable[ParamSpec]) -> list[str]:
    """Log one warning naming every start-up override (a parameters file, ``-p``) that is
    not a parameter of ``node``, with the closest known name; returns the messages.

    rclpy keeps the overrides it was given for this node in ``_parameter_overrides`` (no
    public accessor in Jazzy); names it declares itself are read from the node.
    """
    given = getattr(node, "_parameter_overrides", {})
    own = [name for name in given if node.has_parameter(name)]
    problems = unknown_names(specs, given, known_elsewhere=own)
    if problems:
        node.get_logger().warning(
            "unknown parameters ignored: "
            + "; ".join(problems)
            + ". Check the parameters file against `ros2 param describe` or docs/nodes.md"
        )
    return problems


def parameter_values(node: Node, specs: Iterable[ParamSpec]) -> dict[str, object]:
    """The current value of every spec's parameter, by name."""
    return {spec.name: node.get_parameter(spec.name).value for spec in specs}
