"""`make demo`'s program runs end to end on the bundled samples (tier 2)."""

import subprocess
import sys


def test_demo_shows_audio_and_video_arriving_with_stream_time_stamps():
    result = subprocess.run([sys.executable, "-m", "omniflow.demo", "--seconds", "2"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "stamp spacing  40.00 ms (min 40.00, max 40.00)" in out
    assert "stamp spacing  66.67 ms" in out
    assert "audio blocks lost in transport or capture: 0" in out
    assert "last frame" in out
