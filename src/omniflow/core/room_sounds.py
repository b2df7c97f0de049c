"""Room noises made with numpy, and speech mixed into them at a measured signal-to-noise ratio.

What the hearing tests and benchmarks put around a spoken question: steady pink noise (equal
energy per octave, like air flow and distant traffic), a fan (pink noise plus the hum of its
motor and the blade rate's flutter), a motor (a whine whose pitch wanders, over low rumble),
babble (other voices talking at once), and a far talker (the voice through a synthetic
reverberant room), all deterministic for a given seed. :func:`mix_at_snr`
scales the noise so that the speech's *active* level (its samples above -60 dBFS, the pauses
left out, as in the speech benchmarks) stands ``snr_db`` above the noise's RMS, and reports the
ratio it measured on the mix (the noise where no one speaks). No ROS imports, no I/O.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "active_rms",
    "babble_noise",
    "fan_noise",
    "far_talker",
    "mix_at_snr",
    "motor_noise",
    "pink_noise",
]

_ACTIVE = 32768.0 * 10 ** (-60 / 20)  # samples above -60 dBFS are the voice


def pink_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of pink (1/f power) noise, unit RMS, float64: white noise shaped in the
    frequency domain (amplitude 1/sqrt(f), no DC)."""
    if n <= 0:
        raise ValueError(f"n must be a positive number of samples, not {n}")
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(len(spectrum), dtype=np.float64)
    f[0] = np.inf  # no DC
    x = np.fft.irfft(spectrum / np.sqrt(np.maximum(f, 1.0)), n)
    return x / float(np.sqrt(np.mean(x**2)))


def fan_noise(
    n: int, rng: np.random.Generator, rate: int = 16_000, hum_hz: float = 100.0
) -> np.ndarray:
    """``n`` samples of a fan, unit RMS: pink air noise whose level flutters at the blade rate
    (``hum_hz`` / 4), plus the motor's hum at ``hum_hz`` and two harmonics."""
    t = np.arange(n) / rate
    air = pink_noise(n, rng) * (1.0 + 0.2 * np.sin(2 * np.pi * hum_hz / 4 * t))
    hum = sum(
        0.3 / k * np.sin(2 * np.pi * hum_hz * k * t + rng.uniform(0, 2 * np.pi)) for k in (1, 2, 3)
    )
    x = air + hum
    return x / float(np.sqrt(np.mean(x**2)))


def _unit(x: np.ndarray) -> np.ndarray:
    return x / float(np.sqrt(np.mean(x**2)))


def motor_noise(
    n: int, rng: np.random.Generator, rate: int = 16_000, whine_hz: float = 180.0
) -> np.ndarray:
    """``n`` samples of a motor, unit RMS: a whine near ``whine_hz`` whose pitch wanders by
    up to 10 % (load changes) with five harmonics, over pink rumble below it."""
    t = np.arange(n) / rate
    wander = 1.0 + 0.1 * np.sin(2 * np.pi * 0.3 * t + rng.uniform(0, 2 * np.pi))
    phase = 2 * np.pi * np.cumsum(whine_hz * wander) / rate
    whine = sum(np.sin(k * phase) / k for k in range(1, 6))
    rumble = np.cumsum(pink_noise(n, rng))  # integrated: more low end
    rumble -= np.convolve(rumble, np.ones(801) / 801, mode="same")  # no slow drift
    return _unit(_unit(whine) + 0.7 * _unit(rumble))


def babble_noise(voices: list[np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of babble, unit RMS: the ``voices`` (int16-scale speech), each looped
    from a random offset and given a random level within 6 dB, talking at once."""
    if not voices:
        raise ValueError("babble needs at least one voice")
    x = np.zeros(n)
    for voice in voices:
        v = np.asarray(voice, dtype=np.float64)
        start = int(rng.integers(len(v)))
        looped = np.take(v, np.arange(start, start + n), mode="wrap")
        x += _unit(looped) * 10 ** (rng.uniform(-6, 0) / 20)
    return _unit(x)


def far_talker(
    speech: np.ndarray,
    rng: np.random.Generator,
    rate: int = 16_000,
    rt60_s: float = 0.6,
    direct_to_reverb_db: float = -3.0,
) -> np.ndarray:
    """``speech`` (int16 scale) as a microphone a few metres away hears it, float64, same
    active level: the direct sound plus a reverberant tail (exponentially decaying noise,
    ``rt60_s`` to fall 60 dB) ``direct_to_reverb_db`` relative to it; as long as the speech
    plus the tail."""
    n_tail = int(rt60_s * rate)
    t = np.arange(n_tail) / rate
    tail = rng.standard_normal(n_tail) * 10 ** (-3 * t / rt60_s)
    tail[: int(0.005 * rate)] = 0.0  # the first reflections come after the direct sound
    tail *= 10 ** (-direct_to_reverb_db / 20) / float(np.sqrt(np.sum(tail**2)))
    response = np.concatenate([[1.0], tail[1:]])
    wet = np.convolve(np.asarray(speech, dtype=np.float64), response)
    return wet * active_rms(speech) / active_rms(wet)


def active_rms(speech: np.ndarray) -> float:
    """RMS of the voice in ``speech`` (int16 scale): the samples above -60 dBFS only."""
    voiced = np.asarray(speech, dtype=np.float64)
    voiced = voiced[np.abs(voiced) > _ACTIVE]
    if not len(voiced):
        raise ValueError("the speech has no sample above -60 dBFS: nothing to measure")
    return float(np.sqrt(np.mean(voiced**2)))


def mix_at_snr(
    speech: np.ndarray, noise: np.ndarray, snr_db: float, at: int = 0
) -> tuple[np.ndarray, float]:
    """``noise`` (float, any scale) with ``speech`` (int16 scale) added from sample ``at``, the
    noise scaled so the speech's active level is ``snr_db`` above it; returns the int16 mix
    and the SNR measured on it (active speech level over the noise's RMS, in dB)."""
    if at < 0 or at + len(speech) > len(noise):
        raise ValueError(
            f"the speech ({len(speech)} samples from {at}) does not fit in the noise "
            f"({len(noise)} samples)"
        )
    speech = np.asarray(speech, dtype=np.float64)
    noise = np.asarray(noise, dtype=np.float64)
    scaled = noise * (active_rms(speech) / 10 ** (snr_db / 20) / float(np.sqrt(np.mean(noise**2))))
    mix = scaled.copy()
    mix[at : at + len(speech)] += speech
    out = np.clip(np.rint(mix), -32768, 32767).astype(np.int16)
    # The noise as it is in the mix (rounded, clipped): where there is no speech, if anywhere.
    outside = np.concatenate([out[:at], out[at + len(speech) :]]).astype(np.float64)
    noise_rms = (
        float(np.sqrt(np.mean(outside**2))) if len(outside) else float(np.sqrt(np.mean(scaled**2)))
    )
    measured = 20 * math.log10(active_rms(speech) / noise_rms) if noise_rms > 0 else math.inf
    return out, measured
