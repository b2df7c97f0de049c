"""PortAudio device lookup shared by the microphone source and the speaker sink.

Pure functions over what ``sounddevice.query_devices()`` returns (a sequence of dicts with
``index``, ``name``, ``max_input_channels`` and ``max_output_channels``), so the error
messages can be tested without PortAudio; :func:`find_device`, the one lookup both streams
make through a ``sounddevice`` module; and the lazy import of ``sounddevice`` that turns a
missing PortAudio library into the caller's error type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from omniflow.errors import ConfigError, DeviceNotFoundError, OmniflowError


@dataclass(frozen=True)
class Direction:
    """Input or output: which channel count qualifies a device, and what to suggest when
    there is no device at all."""

    kind: str
    channels_key: str
    short: str
    instead: str


INPUT = Direction(
    "input", "max_input_channels", "in", "use source:=file to read an audio file instead"
)
OUTPUT = Direction(
    "output",
    "max_output_channels",
    "out",
    "use sink:=null to play into nothing or sink:=wav to write a WAV file instead",
)


def _capable(devices: list[Mapping[str, Any]], direction: Direction) -> list[tuple[int, str]]:
    return [
        (int(dev.get("index", i)), str(dev["name"]))
        for i, dev in enumerate(devices)
        if dev.get(direction.channels_key, 0) > 0
    ]


def describe_devices(devices: Iterable[Mapping[str, Any]], direction: Direction) -> str:
    """List the devices of one direction as ``"index: name (N in)"`` lines, or say there are
    none and what to use instead."""
    devices = list(devices)
    lines = [
        f"  {dev.get('index', i)}: {dev['name']} ({dev[direction.channels_key]} {direction.short})"
        for i, dev in enumerate(devices)
        if dev.get(direction.channels_key, 0) > 0
    ]
    if not lines:
        return (
            f"no audio {direction.kind} devices are available (no sound card, or "
            f"PulseAudio not reachable: check PULSE_SERVER); {direction.instead}"
        )
    return f"available {direction.kind} devices:\n" + "\n".join(lines)


def resolve_device(
    devices: Iterable[Mapping[str, Any]], wanted: int | str | None, direction: Direction
) -> int | None:
    """The PortAudio index of a device, or None for PortAudio's default of that direction.

    ``wanted`` is None (the default), an index, or a name matched exactly (case-insensitive)
    first, then as a substring. Raises DeviceNotFoundError listing the devices when nothing
    matches or none exist, ConfigError when a name matches several.
    """
    devices = list(devices)
    candidates = _capable(devices, direction)
    listing = describe_devices(devices, direction)
    kind = direction.kind
    if not candidates:
        what = f"the default {kind} device" if wanted is None else f"{kind} device {wanted!r}"
        raise DeviceNotFoundError(f"cannot open {what}: {listing}")
    if wanted is None:
        return None
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        if any(index == wanted for index, _ in candidates):
            return wanted
        raise DeviceNotFoundError(f"no {kind} device with index {wanted}; {listing}")
    needle = str(wanted).strip().lower()
    exact = [index for index, name in candidates if name.lower() == needle]
    if len(exact) == 1:
        return exact[0]
    partial = [(index, name) for index, name in candidates if needle in name.lower()]
    if len(partial) == 1:
        return partial[0][0]
    if not partial:
        raise DeviceNotFoundError(f"no {kind} device named like {wanted!r}; {listing}")
    matches = ", ".join(f"{index}: {name}" for index, name in partial)
    raise ConfigError(
        f"{kind} device name {wanted!r} is ambiguous, it matches {matches}; "
        "give a longer name or the index"
    )


def find_device(
    sd: ModuleType, wanted: int | str | None, direction: Direction, error: type[OmniflowError]
) -> Mapping[str, Any]:
    """The ``query_devices()`` entry of the device to open: ``wanted`` as
    :func:`resolve_device` reads it, or PortAudio's default device of that direction.

    ``sd`` is the ``sounddevice`` module (:func:`import_sounddevice`). Raises ``error``
    when PortAudio cannot list the devices, DeviceNotFoundError (listing the devices) when
    there is no such device or no default one, ConfigError when a name is ambiguous.
    """
    try:
        devices = sd.query_devices()
    except sd.PortAudioError as err:
        raise error(f"cannot list audio devices: {err}") from err
    index = resolve_device(devices, wanted, direction)
    try:
        return sd.query_devices(index, kind=direction.kind) if index is None else devices[index]
    except (sd.PortAudioError, ValueError) as err:
        raise DeviceNotFoundError(
            f"no default {direction.kind} device ({err}); {describe_devices(devices, direction)}"
        ) from err


def parse_device(location: str) -> int | str | None:
    """A device parameter as PortAudio lookup wants it: "" -> None (the default device),
    digits -> an index, anything else -> a name."""
    text = location.strip()
    if not text:
        return None
    return int(text) if text.isdigit() else text


def import_sounddevice(error: type[OmniflowError], instead: str) -> ModuleType:
    """Import sounddevice, turning a missing PortAudio library into ``error``."""
    try:
        import sounddevice
    except OSError as err:  # raised when libportaudio cannot be loaded
        raise error(
            f"the PortAudio library is missing ({err}); install it with "
            f"'apt install libportaudio2', or {instead}"
        ) from err
    return sounddevice
