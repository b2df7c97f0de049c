"""Tier 1 tests of omniflow.devices.portaudio.find_device: the one device lookup of the
microphone source and the speaker sink, over a scripted ``sounddevice`` module (the pure
matching rules are tested with each stream in test_audio_sources.py and test_playback.py)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from omniflow.devices.portaudio import INPUT, OUTPUT, find_device
from omniflow.errors import ConfigError, DeviceNotFoundError, SinkError, SourceError

DEVICES = [
    {"index": 0, "name": "USB Mic", "max_input_channels": 1, "max_output_channels": 0},
    {"index": 1, "name": "HDMI 0", "max_input_channels": 0, "max_output_channels": 8},
    {"index": 2, "name": "pulse", "max_input_channels": 32, "max_output_channels": 32},
]


class PortAudioError(Exception):
    pass


def fake_sounddevice(
    devices: list[dict[str, Any]] = DEVICES, *, listing_fails: bool = False, default: int | None = 2
) -> ModuleType:
    """A ``sounddevice`` stand-in: ``query_devices()`` lists ``devices`` (or fails), and
    ``query_devices(None, kind=...)`` is the default device (``default``; None: no default,
    which PortAudio reports with an error)."""
    module = ModuleType("sounddevice")
    module.PortAudioError = PortAudioError
    module.calls = []

    def query_devices(device: int | None = None, kind: str | None = None) -> Any:
        module.calls.append((device, kind))
        if device is None and kind is None:
            if listing_fails:
                raise PortAudioError("Error querying device -1")
            return devices
        if default is None:
            raise PortAudioError(f"No {kind} device available")
        return devices[default]

    module.query_devices = query_devices
    return module


@pytest.mark.parametrize(
    ("direction", "wanted", "name"),
    [
        (INPUT, "usb", "USB Mic"),
        (INPUT, 2, "pulse"),
        (OUTPUT, "hdmi", "HDMI 0"),
        (OUTPUT, "pulse", "pulse"),
    ],
)
def test_a_named_or_numbered_device_is_its_listing_entry(direction, wanted, name) -> None:
    sd = fake_sounddevice()
    assert find_device(sd, wanted, direction, SourceError)["name"] == name
    assert sd.calls == [(None, None)]  # listed once, no second query


@pytest.mark.parametrize("direction", [INPUT, OUTPUT], ids=lambda d: d.kind)
def test_no_device_given_asks_portaudio_for_its_default_of_that_direction(direction) -> None:
    sd = fake_sounddevice()
    assert find_device(sd, None, direction, SinkError)["name"] == "pulse"
    assert sd.calls == [(None, None), (None, direction.kind)]


@pytest.mark.parametrize("error", [SourceError, SinkError])
def test_a_listing_that_fails_is_the_callers_error(error) -> None:
    with pytest.raises(error, match="cannot list audio devices: Error querying device"):
        find_device(fake_sounddevice(listing_fails=True), None, INPUT, error)


def test_no_default_device_lists_those_there_are() -> None:
    with pytest.raises(
        DeviceNotFoundError,
        match=r"(?s)no default output device \(No output device available\); "
        r"available output devices:.*1: HDMI 0 \(8 out\)",
    ):
        find_device(fake_sounddevice(default=None), None, OUTPUT, SinkError)


def test_an_unknown_device_lists_the_devices_of_its_direction() -> None:
    with pytest.raises(
        DeviceNotFoundError,
        match=r"(?s)no input device named like 'hdmi'.*"
        r"0: USB Mic \(1 in\)",
    ) as caught:
        find_device(fake_sounddevice(), "hdmi", INPUT, SourceError)
    assert "HDMI 0" not in str(caught.value)


def test_no_device_of_a_direction_at_all_says_what_to_use_instead() -> None:
    inputs_only = [DEVICES[0]]
    with pytest.raises(
        DeviceNotFoundError, match="no audio output devices are available.*sink:=null"
    ):
        find_device(fake_sounddevice(inputs_only), None, OUTPUT, SinkError)


def test_an_ambiguous_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ambiguous"):
        find_device(fake_sounddevice(), "u", INPUT, SourceError)
