"""A private PulseAudio daemon for the real-device audio tests (shared test helper).

scripts/pulse_null.sh starts PulseAudio (no sound card needed) with a null
sink ``omniflow_null`` and a virtual source ``omniflow_mic`` on its monitor,
both made the defaults. PortAudio reaches them through the ALSA "pulse"
plugin device, which is paced in real time: audio played to the sink comes
back out of the source.

Test modules use the fixture by importing it (test/integration is on
``sys.path``)::

    from pulse import pulse_server

Needs the Debian packages pulseaudio, pulseaudio-utils, libasound2-plugins and
libportaudio2; the fixture skips with the reason when one is missing.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pulse_null.sh"
SCRIPT_TIMEOUT_S = 30.0
FIRST_BLOCK_TIMEOUT_S = 3.0  # PulseAudio's first callbacks can take up to ~2 s
SINK = "omniflow_null"
SOURCE = "omniflow_mic"


def _missing_requirement() -> str | None:
    for tool in ("pulseaudio", "pactl", "paplay"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install pulseaudio pulseaudio-utils)"
    if not glob.glob("/usr/lib/*/alsa-lib/libasound_module_pcm_pulse.so") and not glob.glob(
        "/usr/lib/alsa-lib/libasound_module_pcm_pulse.so"
    ):
        return "the ALSA pulse plugin is not installed (apt-get install libasound2-plugins)"
    try:
        import sounddevice  # noqa: F401
    except OSError as err:
        return f"PortAudio is not installed (apt-get install libportaudio2): {err}"
    return None


@pytest.fixture(scope="module")
def pulse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private PulseAudio daemon for this module; PULSE_SERVER exported while it runs."""
    reason = _missing_requirement()
    if reason is not None:
        pytest.skip(reason)
    env = {**os.environ, "OMNIFLOW_PULSE_DIR": str(tmp_path_factory.mktemp("pulse"))}
    started = subprocess.run(
        ["bash", str(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )
    assert started.returncode == 0, f"pulse_null.sh failed: {started.stderr}"
    server = started.stdout.strip()
    previous = os.environ.get("PULSE_SERVER")
    os.environ["PULSE_SERVER"] = server
    _rescan_portaudio()
    try:
        yield server
    finally:
        subprocess.run(
            ["bash", str(SCRIPT), "--stop"],
            env=env,
            capture_output=True,
            timeout=SCRIPT_TIMEOUT_S,
            check=False,
        )
        if previous is None:
            os.environ.pop("PULSE_SERVER", None)
        else:
            os.environ["PULSE_SERVER"] = previous
        _rescan_portaudio()


def _rescan_portaudio() -> None:
    """PortAudio lists devices once at initialisation: re-initialise if already imported."""
    sd = sys.modules.get("sounddevice")
    if sd is not None:
        sd._terminate()
        sd._initialize()
