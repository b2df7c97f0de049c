"""Tier 1 tests of omniflow.nodes.camera.output_size: the published frame size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniflow.nodes.camera import output_size


@pytest.mark.parametrize(
    ("source", "wanted", "expected"),
    [
        ((640, 480), (0, 0), (640, 480)),  # 0/0 keeps the source's size
        ((1, 1), (0, 0), (1, 1)),
        ((640, 480), (320, 100), (320, 100)),  # both set: exactly that, aspect ignored
        ((640, 480), (1920, 1080), (1920, 1080)),
        ((640, 480), (320, 0), (320, 240)),  # only width: keeps the aspect ratio
        ((1920, 1080), (1280, 0), (1280, 720)),
        ((1920, 1080), (100, 0), (100, 56)),  # 56.25 rounds to nearest
        ((640, 480), (0, 240), (320, 240)),  # only height: keeps the aspect ratio
        ((1920, 1080), (0, 720), (1280, 720)),
        ((1920, 1080), (0, 100), (178, 100)),  # 177.8 rounds up
        ((1000, 1), (10, 0), (10, 1)),  # would round to 0: never 0
        ((1, 1000), (0, 10), (1, 10)),
    ],
)
def test_output_size(
    source: tuple[int, int], wanted: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert output_size(*source, *wanted) == expected


sides = st.integers(min_value=1, max_value=8000)


@given(
    sides, sides, st.integers(min_value=0, max_value=8000), st.integers(min_value=0, max_value=8000)
)
def test_output_size_is_never_zero_and_honours_what_was_asked(
    width: int, height: int, want_width: int, want_height: int
) -> None:
    out_width, out_height = output_size(width, height, want_width, want_height)
    assert out_width >= 1 and out_height >= 1
    assert out_width == (want_width or out_width)
    assert out_height == (want_height or out_height)
    if bool(want_width) != bool(want_height):  # one side given: aspect kept to within a pixel
        if want_width:
            assert abs(out_height - height * want_width / width) <= 0.5 or out_height == 1
        else:
            assert abs(out_width - width * want_height / height) <= 0.5 or out_width == 1
