"""`make demo`'s program runs end to end on the bundled samples (tier 2)."""

import re
import subprocess
import sys


def test_demo_shows_audio_and_video_arriving_with_stream_time_stamps():
    result = subprocess.run([sys.executable, "-m", "omniflow.demo", "--seconds", "2"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # Medians: stream time, one period apart (a block lost under load widens only the max).
    assert re.search(r"audio: +\d+ received, +[\d.]+/s, stamp spacing +40\.00 ms", out), out
    assert re.search(r"video: +\d+ received, +[\d.]+/s, stamp spacing +66\.67 ms", out), out
    assert re.search(r"audio blocks lost in transport or capture: \d+", out), out
    assert "last frame" in out
