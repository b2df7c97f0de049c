"""Speex's echo canceller through ctypes (omniflow.engines.aec), on libspeexdsp itself."""

from __future__ import annotations

import math

import numpy as np
import pytest

from omniflow.core.echo import EchoReference
from omniflow.core.timing import NS_PER_SAMPLE
from omniflow.engines.aec import SpeexEchoCanceller, load_speexdsp
from omniflow.errors import AudioFormatError, ConfigError, EngineError

try:
    load_speexdsp()
except EngineError as err:  # the Debian package is in scripts/install_system_deps.sh
    pytest.skip(str(err), allow_module_level=True)

T0 = 1_000_000_000_000
CHUNK = 640


def test_a_fixed_echo_path_is_learnt_and_removed():
    rng = np.random.default_rng(0)
    played = rng.standard_normal(16000 * 6) * 3000
    echo = 0.5 * np.concatenate([np.zeros(800), played[:-800]])  # 50 ms, -6 dB
    reference = EchoReference(history_ms=1000)
    aec = SpeexEchoCanceller(reference, suppress_score=2.0)
    scores = []
    for i in range(len(played) // CHUNK):
        stamp = T0 + i * CHUNK * NS_PER_SAMPLE
        reference.add(stamp, played[i * CHUNK : (i + 1) * CHUNK])
        mic = np.round(echo[i * CHUNK : (i + 1) * CHUNK]).astype(np.int16)
        result = aec.process(mic, stamp)
        scores.append(result.echo_score)
        assert not result.echo  # the gate is off above 1
    assert np.median(scores[-25:]) > 0.99  # more than 20 dB removed once converged


def test_nothing_played_passes_the_chunk_unchanged():
    aec = SpeexEchoCanceller(EchoReference())
    mic = np.arange(CHUNK, dtype=np.int16)
    result = aec.process(mic, T0)
    assert math.isnan(result.echo_score) and np.array_equal(result.samples, mic)


def test_chunks_must_be_whole_frames_and_options_in_range():
    aec = SpeexEchoCanceller(EchoReference())
    with pytest.raises(AudioFormatError, match="multiples of 320"):
        aec.process(np.zeros(100, np.int16), T0)
    with pytest.raises(ConfigError, match="frame_ms"):
        SpeexEchoCanceller(EchoReference(), frame_ms=30)
