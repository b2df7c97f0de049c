"""Tier 1 tests of omniflow.core.params and omniflow.ros.params.descriptor_for (no rclpy.init)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniflow.core.params import (
    ParamSpec,
    defaults,
    params_files,
    section_applies,
    section_problems,
    unknown_names,
    validate,
)
from omniflow.errors import ConfigError
from omniflow.ros.params import descriptor_for

FPS = ParamSpec(
    "fps", 15.0, "Frames per second", unit="frames/s", minimum=0.5, maximum=60.0, live=True
)
WIDTH = ParamSpec("width", 0, "Resize width", unit="px", minimum=0, maximum=7680)
LOOP = ParamSpec("loop", True, "Start again at the end")
ENCODING = ParamSpec("encoding", "rgb8", "Published encoding", choices=("rgb8", "bgr8", "mono8"))
DEVICE = ParamSpec("device", "0", "Camera index or path", read_only=True)
GAIN = ParamSpec("gain", 1.0, "Gain", minimum=0.0)
LEVEL = ParamSpec("level", 3, "Level", maximum=10)
SPECS = (FPS, WIDTH, LOOP, ENCODING, DEVICE)


# --- check: types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        (FPS, 15.0),
        (FPS, 30),  # an int stands for a float
        (WIDTH, 640),
        (LOOP, False),
        (ENCODING, "mono8"),
        (DEVICE, "/dev/video2"),
        (DEVICE, ""),
    ],
)
def test_check_accepts_values_of_the_right_type(spec: ParamSpec, value: object) -> None:
    assert spec.check(value) is None


@pytest.mark.parametrize(
    ("spec", "value", "expected", "got"),
    [
        (WIDTH, True, "int", "bool True"),  # bool is an int in Python, not here
        (WIDTH, 640.0, "int", "float 640.0"),  # a float never stands for an int
        (WIDTH, "640", "int", "str '640'"),
        (LOOP, 1, "bool", "int 1"),
        (LOOP, "true", "bool", "str 'true'"),
        (FPS, True, "float", "bool True"),
        (FPS, "15", "float", "str '15'"),
        (DEVICE, 0, "str", "int 0"),
        (ENCODING, None, "str", "NoneType None"),
    ],
)
def test_check_names_expected_and_actual_type(
    spec: ParamSpec, value: object, expected: str, got: str
) -> None:
    error = spec.check(value)
    assert error is not None
    assert expected in error
    assert got in error


def test_int_for_float_is_range_checked_as_a_float() -> None:
    assert FPS.check(60) is None
    assert FPS.check(61) == "61.0 is outside the allowed range [0.5, 60.0]"


# --- check: choices and ranges -------------------------------------------------------------


def test_value_outside_choices_names_the_allowed_ones() -> None:
    error = ENCODING.check("yuv422")
    assert error is not None
    assert "'yuv422'" in error
    assert "rgb8, bgr8, mono8" in error


@pytest.mark.parametrize(
    ("spec", "value", "allowed"),
    [
        (FPS, 0.5, True),  # ranges are inclusive at both ends
        (FPS, 60.0, True),
        (FPS, 0.49, False),
        (FPS, 60.01, False),
        (WIDTH, 0, True),
        (WIDTH, 7680, True),
        (WIDTH, -1, False),
        (WIDTH, 7681, False),
        (GAIN, 0.0, True),  # only a lower bound
        (GAIN, 1e300, True),
        (GAIN, -1e-9, False),
        (LEVEL, -(10**9), True),  # only an upper bound
        (LEVEL, 11, False),
    ],
)
def test_ranges_are_inclusive(spec: ParamSpec, value: float, allowed: bool) -> None:
    assert (spec.check(value) is None) is allowed


@pytest.mark.parametrize(
    ("spec", "value", "message"),
    [
        (FPS, 0.25, "0.25 is outside the allowed range [0.5, 60.0]"),
        (WIDTH, -1, "-1 is outside the allowed range [0, 7680]"),
        (GAIN, -2.0, "-2.0 is outside the allowed range >= 0.0"),
        (LEVEL, 11, "11 is outside the allowed range <= 10"),
    ],
)
def test_range_message_states_value_and_range(spec: ParamSpec, value: float, message: str) -> None:
    assert spec.check(value) == message


@pytest.mark.parametrize("spec", [FPS, GAIN, ParamSpec("free", 0.0, "Unbounded")])
def test_nan_is_rejected_even_without_range(spec: ParamSpec) -> None:
    assert spec.check(math.nan) == "NaN is not allowed"


@given(st.floats(min_value=0.5, max_value=60.0))
def test_every_float_in_range_is_accepted(value: float) -> None:
    assert FPS.check(value) is None


# --- full_description ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "parts", "absent"),
    [
        (
            FPS,
            ["Frames per second.", "Unit: frames/s.", "Range: [0.5, 60.0].", "Applied at once."],
            ["Allowed:", "restart"],
        ),
        (WIDTH, ["Unit: px.", "Range: [0, 7680].", "Applied on configure."], ["Allowed:"]),
        (ENCODING, ["Allowed: rgb8, bgr8, mono8.", "Applied on configure."], ["Unit:", "Range:"]),
        (
            DEVICE,
            ["Read at start-up; changing it needs a restart."],
            ["Applied", "Unit:", "Range:"],
        ),
        (GAIN, ["Range: >= 0.0."], []),
        (LEVEL, ["Range: <= 10."], []),
    ],
)
def test_full_description_mentions_unit_allowed_range_and_when_applied(
    spec: ParamSpec, parts: list[str], absent: list[str]
) -> None:
    text = spec.full_description
    for part in parts:
        assert part in text
    for part in absent:
        assert part not in text


def test_full_description_ends_the_description_with_one_full_stop() -> None:
    spec = ParamSpec("x", 1, "Has a full stop already.")
    assert spec.full_description.startswith("Has a full stop already. ")
    assert ".." not in spec.full_description


# --- construction errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"default": 100, "maximum": 60}, "100 is outside the allowed range <= 60"),
        ({"default": math.nan}, "NaN is not allowed"),
        (
            {"default": "yuv", "choices": ("rgb8", "bgr8")},
            "'yuv' is not one of the allowed values: rgb8, bgr8",
        ),
    ],
)
def test_invalid_default_raises_config_error_naming_the_parameter(
    kwargs: dict, reason: str
) -> None:
    with pytest.raises(ConfigError) as excinfo:
        ParamSpec("p", description="d", **kwargs)
    message = str(excinfo.value)
    assert "default of parameter 'p' is invalid" in message
    assert reason in message


def test_read_only_and_live_together_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="'p' cannot be both read-only and live"):
        ParamSpec("p", 1, "d", read_only=True, live=True)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ParamSpec("p", -1, "d", minimum=0)


# --- validate and defaults -----------------------------------------------------------------


def test_validate_returns_one_message_per_problem_naming_the_parameter() -> None:
    problems = validate(SPECS, {"fps": 0.0, "width": 640, "encoding": "yuv", "loop": 1})
    assert len(problems) == 3
    assert problems[0].startswith("parameter 'fps': ")
    assert problems[1].startswith("parameter 'encoding': ")
    assert "rgb8, bgr8, mono8" in problems[1]
    assert problems[2].startswith("parameter 'loop': expected a bool")


def test_validate_accepts_good_values_and_ignores_names_it_has_no_spec_for() -> None:
    assert validate(SPECS, {"fps": 30, "unknown": object(), "use_sim_time": True}) == []
    assert validate(SPECS, {}) == []


def test_validate_accepts_any_iterable_of_specs() -> None:
    assert validate(iter(SPECS), {"width": -5}) == [
        "parameter 'width': -5 is outside the allowed range [0, 7680]"
    ]


def test_defaults_maps_every_name_to_its_default() -> None:
    assert defaults(SPECS) == {
        "fps": 15.0,
        "width": 0,
        "loop": True,
        "encoding": "rgb8",
        "device": "0",
    }
    assert defaults(()) == {}
    assert validate(SPECS, defaults(SPECS)) == []


# --- descriptor_for ------------------------------------------------------------------------


def test_descriptor_of_a_float_has_a_floating_point_range() -> None:
    descriptor = descriptor_for(FPS)
    assert descriptor.name == "fps"
    assert descriptor.description == FPS.full_description
    assert descriptor.read_only is False
    assert list(descriptor.integer_range) == []
    (rng,) = descriptor.floating_point_range
    assert (rng.from_value, rng.to_value, rng.step) == (0.5, 60.0, 0.0)


def test_descriptor_of_an_int_has_an_integer_range() -> None:
    descriptor = descriptor_for(WIDTH)
    assert list(descriptor.floating_point_range) == []
    (rng,) = descriptor.integer_range
    assert (rng.from_value, rng.to_value, rng.step) == (0, 7680, 0)


def test_descriptor_is_read_only_when_the_spec_is() -> None:
    descriptor = descriptor_for(DEVICE)
    assert descriptor.read_only is True
    assert "restart" in descriptor.description


@pytest.mark.parametrize(
    "spec",
    [
        ParamSpec("flag", False, "A bool with a range", minimum=0, maximum=1),
        ENCODING,
        GAIN,  # only one bound: nothing ROS could express as a range
        LEVEL,
    ],
)
def test_descriptor_has_no_range_for_bools_strings_or_half_open_bounds(spec: ParamSpec) -> None:
    descriptor = descriptor_for(spec)
    assert list(descriptor.integer_range) == []
    assert list(descriptor.floating_point_range) == []


# --- unknown_names -------------------------------------------------------------------------


def test_unknown_names_name_the_closest_declared_parameter() -> None:
    specs = (
        ParamSpec("window.before_ms", 80, "Before"),
        ParamSpec("window.after_ms", 120, "After"),
    )
    assert unknown_names(specs, ["window.befor_ms", "window.after_ms"]) == [
        "'window.befor_ms' is not a parameter of this node (did you mean 'window.before_ms'?)"
    ]


def test_unknown_names_without_a_close_match_give_no_hint() -> None:
    assert unknown_names(SPECS, ["colour_space"]) == [
        "'colour_space' is not a parameter of this node"
    ]


def test_unknown_names_skip_the_middlewares_own_parameters() -> None:
    given = ["use_sim_time", "qos_overrides./audio.subscription.depth", "fps"]
    assert unknown_names(SPECS, given, known_elsewhere=["use_sim_time"]) == []


# --- parameters files: which sections apply to a node ---------------------------------------


def test_params_files_are_read_from_the_ros_arguments() -> None:
    argv = ["prog", "--params-file", "not-ros.yaml", "--ros-args", "-r", "__ns:=/robot"]
    argv += ["--params-file", "a.yaml", "--log-level", "info", "--params-file", "b.yaml", "--"]
    assert params_files(argv + ["--params-file", "after.yaml"]) == ["a.yaml", "b.yaml"]


@pytest.mark.parametrize(
    ("section", "applies"),
    [
        ("/**", True),
        ("fusion", False),
        ("/robot/fusion", True),
        ("robot/fusion", True),
        ("/**/fusion", True),
        ("/*/fusion", True),
        ("/robot/*", True),
        ("/other/fusion", False),
        ("/robot/speech", False),
    ],
)
def test_a_section_applies_by_the_nodes_full_name(section: str, applies: bool) -> None:
    assert section_applies(section, "/robot/fusion") is applies


def test_a_file_with_a_section_for_the_node_has_no_problem() -> None:
    sections = ["fusion", "speech", "dialogue"]
    assert section_problems(sections, "/fusion", "robot.yaml") == []
    assert section_problems(["/**"], "/robot/fusion", "robot.yaml") == []
    assert section_problems([], "/fusion", "empty.yaml") == []


def test_a_file_whose_sections_miss_the_node_names_the_closest_and_what_would_apply() -> None:
    (problem,) = section_problems(["fusoin", "speech"], "/fusion", "robot.yaml")
    assert problem == (
        "no section of robot.yaml applies to this node (/fusion): its sections are 'fusoin', "
        "'speech' ('fusoin' is close to 'fusion'); name it '/fusion', '/**/fusion' or '/**'"
    )
    (problem,) = section_problems(["fusion"], "/robot/fusion", "robot.yaml")
    assert "('fusion' has the node's name, in another namespace); name it '/robot/fusion'" in (
        problem
    )
