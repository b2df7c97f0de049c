"""The robot's own voice taken out of the microphone stream (pure numpy, no ROS).

Full duplex: the microphone keeps listening while the speaker plays, so it hears the robot.
The speech node publishes every block it plays, stamped with the stream time its first sample
goes out; :class:`EchoReference` keeps a bounded, stamp-aligned history of those blocks (zeros
where nothing played). For each microphone chunk, :class:`EchoGate`:

1. finds the delay at which the reference best explains the microphone: the normalised
   cross-correlation over every delay in ``[0, max_delay_ms]``, one FFT per chunk, averaged
   over the last half second or so (the acoustic path barely moves, while the user's voice is
   uncorrelated with the reference and averages out, so double talk cannot throw it);
2. predicts the echo's power in 20 frequency bands, frame by frame (20 ms Hann frames, 10 ms
   hop): the reference at that delay (the direct path) and up to ``reverb_ms`` before it,
   decaying as a reverberant room would, times a per-band gain of the echo path. The gains
   are learnt as an upper envelope (fast up, slow down) from the chunks the echo dominates
   (a scaled copy of the delayed reference explains a good share of them; a band heard far
   above its prediction there is the user's, not a louder path, and climbs slowly), one for the
   reverberant sum and one for the direct reference alone (learnt on onsets, where the sum
   under-predicts); the larger prediction counts, since an echo underestimated leaks through;
3. reports ``echo_score``: the predicted echo's share of the chunk's energy (0..1; NaN while
   nothing played within reach) and ``echo``: true when it reaches ``suppress_score``. An echo
   chunk is replaced by comfort noise: noise like the room's, with its spectrum and level
   (digital silence would make a VAD's noise model adapt to zero and take the real noise that
   follows for speech; white noise at the level of a room whose noise is pink has more
   energy where voices are than the room has: webrtcvad took the first such chunk, or the
   room's own noise coming back after it, for speech, and the robot's answers in 10 dB pink
   noise were "interrupted" at their first syllable). Any other chunk has the predicted echo
   power subtracted band by band (``over`` times it) and goes on to the voice-activity
   detector and the recogniser;
4. learns the echo path as a linear filter (:class:`LinearEcho`) from the chunks the robot's
   voice has alone. Once it cancels the echo by 20 dB, ``heard`` is its residual: what the
   recogniser gets instead of the comfort noise (in a chunk where the user talks over the
   robot) or the band subtraction, so that the first word of an interruption, said while
   the robot still talks, is heard with its waveform. The voice-activity detector keeps
   ``samples``: what starts speech is unchanged.

The room's noise is learnt, bin by bin, from the chunks heard while nothing plays, by
minimum statistics: each bin's power smoothed over a few chunks, its lowest value tracked
with a slow rise (the user's voice lifts it by at most :data:`_FLOOR_RISE` a chunk), divided
by what that minimum is of the mean for noise (:data:`_FLOOR_BIAS`), so that the comfort noise
is as loud as the room on average, not as quiet as its quietest moment.

Double talk passes because the user's voice is not predicted by the reference: a chunk with
both scores well below echo alone, and the subtraction leaves the user's bands.

``benchmarks/echo.py`` compares this gate with Speex's adaptive canceller
(``omniflow.engines.aec``) on speech echoes through synthetic rooms; see the "Echo" section of
``benchmarks/README.md`` for why the gate is the default.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from omniflow.core.timing import NS_PER_MS, NS_PER_S, SAMPLE_RATE
from omniflow.errors import AudioFormatError, ConfigError

__all__ = ["EchoGate", "EchoReference", "EchoResult", "LinearEcho"]

# Reference quieter than this (mean square, int16 units; about -70 dBFS) counts as silence.
_SILENT_POWER = 10.0
# Weight of the past in the running cross-correlation, per chunk (about 10 chunks, 0.4 s).
_CORR_FORGET = 0.9


def _check_rate(sample_rate: int) -> int:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ConfigError(f"sample_rate must be a positive integer (Hz), got {sample_rate!r}")
    return sample_rate


class EchoReference:
    """A bounded history of the played audio, addressed by stream time.

    ``add`` takes a block and the stream time of its first sample; ``window`` returns the
    samples of any span, with zeros where nothing played (the speech node publishes no
    silence between phrases). Blocks older than ``history_ms`` before the newest block's end
    are dropped, so memory is bounded whatever the stream does. A block stamped more than
    ``history_ms`` before the newest one (a restarted clock, a looping bag) clears the history.
    Not thread-safe: one writer and reader, or an external lock.
    """

    def __init__(self, history_ms: float = 2000.0, sample_rate: int = SAMPLE_RATE) -> None:
        if not math.isfinite(history_ms) or history_ms <= 0:
            raise ConfigError(f"history_ms must be a positive number of ms, not {history_ms}")
        self.sample_rate = _check_rate(sample_rate)
        self._history_ns = int(history_ms * NS_PER_MS)
        self._blocks: deque[tuple[int, np.ndarray]] = deque()
        self._newest_end_ns = 0

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def newest_end_ns(self) -> int:
        """Stream time just after the newest played sample (0 when empty)."""
        return self._newest_end_ns

    def clear(self) -> None:
        """Forget every block."""
        self._blocks.clear()
        self._newest_end_ns = 0

    def _samples_ns(self, count: int) -> int:
        return count * NS_PER_S // self.sample_rate

    def add(self, stamp_ns: int, samples: np.ndarray) -> None:
        """Keep one played block (1-D int16 or float in int16 units) that started at
        ``stamp_ns``. AudioFormatError for anything but a non-empty 1-D finite block."""
        block = np.asarray(samples)
        if block.ndim != 1 or block.size == 0:
            raise AudioFormatError(
                f"a reference block must be non-empty mono samples, got shape {block.shape}"
            )
        block = block.astype(np.float32)
        if not np.all(np.isfinite(block)):
            raise AudioFormatError("reference samples contain NaN or infinity")
        if stamp_ns < self._newest_end_ns - self._history_ns:
            self.clear()
        end_ns = stamp_ns + self._samples_ns(len(block))
        self._blocks.append((int(stamp_ns), block))
        self._newest_end_ns = max(self._newest_end_ns, end_ns)
        horizon = self._newest_end_ns - self._history_ns
        while (
            self._blocks
            and self._blocks[0][0] + self._samples_ns(len(self._blocks[0][1])) < horizon
        ):
            self._blocks.popleft()

    def window(self, start_ns: int, count: int) -> np.ndarray:
        """``count`` float32 samples from stream time ``start_ns``, zeros where nothing played."""
        out = np.zeros(count, dtype=np.float32)
        rate = self.sample_rate
        for stamp_ns, block in self._blocks:
            offset = round((stamp_ns - start_ns) * rate / NS_PER_S)
            lo, hi = max(offset, 0), min(offset + len(block), count)
            if lo < hi:
                out[lo:hi] = block[lo - offset : hi - offset]
        return out


@dataclass(frozen=True)
class EchoResult:
    """What the echo stage made of one microphone chunk."""

    samples: np.ndarray  # int16: the chunk with the robot's voice removed
    echo_score: float  # share of the chunk's energy the echo explains; NaN: no reference
    echo: bool  # the chunk is the robot's voice (score >= the suppress score)
    delay_ms: float  # delay of the reference in the microphone (NaN: not estimated)
    # What the recogniser should hear of the chunk: the linear canceller's residual once it
    # has learnt the echo path (the user's waveform kept, even in a chunk the echo dominates);
    # None: ``samples``.
    heard: np.ndarray | None = None


class EchoGate:
    """Reference-correlation echo suppressor (see the module docstring).

    ``suppress_score``: a chunk whose echo score reaches it is the robot's voice and is
    replaced by the noise floor. ``confirm``: chunks in a row that must score below it before
    any passes (1: each on its own; more trades double-talk delay for fewer leaks; see
    ``benchmarks/README.md``). ``max_delay_ms``: longest speaker-to-microphone delay
    searched (output buffering included). ``reverb_ms``: how long the room keeps an echo
    audible after the reference (the predicted echo includes the reference this far back,
    decaying). ``linear``: also run the :class:`LinearEcho` canceller for ``heard``.
    ``over``: overestimation of the echo in the subtraction (more removes more echo and more
    of the user's voice during double talk). Not thread-safe: one gate per microphone stream,
    called from one thread.
    """

    def __init__(
        self,
        reference: EchoReference,
        *,
        suppress_score: float = 0.7,
        max_delay_ms: float = 300.0,
        reverb_ms: float = 320.0,
        over: float = 2.0,
        confirm: int = 1,
        linear: bool = True,
    ) -> None:
        if not 0.0 < suppress_score <= 1.0:
            raise ConfigError(f"suppress_score must be in (0, 1], not {suppress_score}")
        if not math.isfinite(max_delay_ms) or not 0 <= max_delay_ms <= 2000:
            raise ConfigError(f"max_delay_ms must be in [0, 2000] ms, not {max_delay_ms}")
        if not math.isfinite(reverb_ms) or not 0 <= reverb_ms <= 2000:
            raise ConfigError(f"reverb_ms must be in [0, 2000] ms, not {reverb_ms}")
        if not math.isfinite(over) or not 0.5 <= over <= 10:
            raise ConfigError(f"over must be in [0.5, 10], not {over}")
        if isinstance(confirm, bool) or not isinstance(confirm, int) or not 1 <= confirm <= 10:
            raise ConfigError(f"confirm must be an integer in [1, 10], not {confirm!r}")
        self.confirm = confirm
        self._clear_run = 0  # chunks in a row below the suppress score
        self.reference = reference
        self.suppress_score = float(suppress_score)
        self.over = float(over)
        self._max_delay = round(max_delay_ms * reference.sample_rate / 1000)
        self._reverb = round(reverb_ms * reference.sample_rate / 1000)
        self._corr: np.ndarray | None = None  # running cross-correlation, by delay
        self._ref_power: np.ndarray | None = None
        self._mic_power = 0.0
        self._fft_n = 0
        # Echo path power gains per band: of the reverberant sum (every chunk the echo
        # dominates) and of the direct reference alone (onsets, where the sum under-predicts).
        self._gain: np.ndarray | None = None
        self._direct_gain: np.ndarray | None = None
        self._learnt = 0  # chunks the gain was learnt from
        self._direct_learnt = 0
        self._previous = np.zeros(0)  # the last 10 ms of the previous chunk
        # The room's noise, from the chunks heard while nothing played (see the module
        # docstring), as power per rfft bin and sample (white noise of variance v gives v in
        # every bin): smoothed over chunks, and its tracked minimum.
        self._smoothed: np.ndarray | None = None
        self._floor: np.ndarray | None = None
        self._rng = np.random.default_rng(0)  # comfort noise
        self._linear = LinearEcho(reference) if linear else None

    @property
    def max_delay_ms(self) -> float:
        return self._max_delay * 1000 / self.reference.sample_rate

    def reset(self) -> None:
        """Forget the delay and echo path estimates (a new stream or acoustic path)."""
        self._corr = self._ref_power = self._gain = self._direct_gain = None
        self._direct_learnt = 0
        self._mic_power = 0.0
        self._learnt = 0
        self._previous = np.zeros(0)
        if self._linear is not None:
            self._linear.reset()

    def process(self, samples: np.ndarray, stamp_ns: int) -> EchoResult:
        """Take the echo out of one int16 chunk whose first sample was captured at ``stamp_ns``."""
        mic = np.asarray(samples)
        if mic.ndim != 1 or mic.size == 0:
            raise AudioFormatError(f"a microphone chunk must be non-empty mono, got {mic.shape}")
        n, d = len(mic), self._max_delay
        rate = self.reference.sample_rate
        hop = _FRAME // 2
        x = mic.astype(np.float64)
        previous = self._previous if len(self._previous) == hop else np.zeros(hop)
        self._previous = x[-hop:]
        frames_back = self._reverb // hop  # reference frames that can still be heard
        back = d + hop * (frames_back + 1)
        ref = self.reference.window(stamp_ns - back * NS_PER_S // rate, n + back)
        silent = float(np.mean(ref * ref)) < _SILENT_POWER
        if silent or self._floor is None:
            self._learn_noise(np.fft.rfft(x), n)
        if silent:
            self._decay()
            self._clear_run = self.confirm
            return EchoResult(np.asarray(mic, dtype=np.int16), math.nan, False, math.nan)
        ref = ref.astype(np.float64)
        delay = self._delay(x, ref[back - d :])
        fit = _fit_share(x, ref[back - delay : back - delay + n])
        # Microphone frames (20 ms, 10 ms hop) over the chunk and the 10 ms before it, and the
        # reference frames that reach them: direct (same offset, delayed) and up to
        # ``reverb_ms`` older, as heard through a reverberant room.
        mic_frames = _frames(np.concatenate([previous, x]))
        count = len(mic_frames)
        first = back - delay - hop
        ref_frames = _frames(ref[first - frames_back * hop : first + count * hop + hop])
        mic_bands = _bands(_power(mic_frames))
        ref_bands = _bands(_power(ref_frames))
        decay = _REVERB_DECAY ** np.arange(frames_back + 1)
        heard = np.stack(
            [
                (decay[:, None] * ref_bands[frames_back + f - np.arange(frames_back + 1)]).sum(
                    axis=0
                )
                for f in range(count)
            ]
        )
        mic_total, heard_total = mic_bands.sum(axis=0), heard.sum(axis=0)
        direct_total = ref_bands[frames_back : frames_back + count].sum(axis=0)
        self._gain, self._learnt = _learn(
            self._gain, self._learnt, mic_total, heard_total, fit >= _LEARN_FIT
        )
        onset = direct_total.sum() >= _ONSET_SHARE * heard_total.sum()
        self._direct_gain, self._direct_learnt = _learn(
            self._direct_gain,
            self._direct_learnt,
            mic_total,
            direct_total,
            onset and fit >= _LEARN_FIT,
        )
        echo_bands = np.maximum(self._gain * heard_total, self._direct_gain * direct_total)
        energy = float(mic_total.sum())
        score = float(min(echo_bands.sum() / energy, 1.0)) if energy > 0.0 else 1.0
        residual = None
        if self._linear is not None:
            noise = n * float(self._floor.mean()) / _FLOOR_BIAS
            residual = self._linear.process(x, stamp_ns, delay, score >= _ADAPT_SCORE, noise)
            residual = residual if self._linear.converged else None
        delay_ms = delay * 1000 / rate
        if energy > 0.0:  # a silent microphone is comfort noise, and no chunk of the run
            self._clear_run = 0 if score >= self.suppress_score else self._clear_run + 1
        if energy <= 0.0 or self._clear_run < self.confirm:
            heard = _pcm(residual) if residual is not None and self._linear.double_talk else None
            return EchoResult(self._comfort(n), score, True, delay_ms, heard)
        heard = None if residual is None else _pcm(residual)
        # Power subtraction per band, applied as a gain on the chunk's own spectrum.
        keep = np.sqrt(np.clip(1.0 - self.over * echo_bands / (mic_total + 1e-9), 0.0, 1.0))
        spectrum = np.fft.rfft(x)
        cleaned = np.fft.irfft(spectrum * keep[_band_of_bin(len(spectrum))], n)
        return EchoResult(_pcm(cleaned), score, False, delay_ms, heard)

    def _learn_noise(self, spectrum: np.ndarray, count: int) -> None:
        """Take one chunk heard while nothing played into the room's noise (a chunk of
        another length starts it again)."""
        power = np.abs(spectrum) ** 2 / count
        if self._floor is None or len(self._floor) != len(power):
            self._smoothed, self._floor = power, power
            return
        self._smoothed = _FLOOR_SMOOTH * self._smoothed + (1.0 - _FLOOR_SMOOTH) * power
        self._floor = np.minimum(self._smoothed, self._floor * _FLOOR_RISE)

    def _comfort(self, count: int) -> np.ndarray:
        """Comfort noise in place of a chunk that was only echo: white noise shaped bin by
        bin to the room's noise (silence before any estimate)."""
        white = np.fft.rfft(self._rng.standard_normal(count))
        floor = self._floor
        if floor is None or len(floor) != len(white):
            floor = np.zeros(len(white))
        noise = np.fft.irfft(white * np.sqrt(floor / _FLOOR_BIAS), count)
        return np.clip(np.round(noise), -32768, 32767).astype(np.int16)

    def _decay(self) -> None:
        if self._corr is not None:
            self._corr *= _CORR_FORGET
            self._ref_power *= _CORR_FORGET
            self._mic_power *= _CORR_FORGET

    def _delay(self, x: np.ndarray, ref: np.ndarray) -> int:
        """Samples of delay (0..max) at which ``ref`` (max + len(x) samples, ending with the
        chunk) best matches ``x``, from the running normalised cross-correlation."""
        n, d = len(x), self._max_delay
        size = 1 << (n + d - 1).bit_length()
        if size != self._fft_n:
            self._fft_n, self._corr = size, None
        # corr[k] = sum_i x[i] * ref[k + i]: offset k in the window is delay d - k.
        spectrum = np.fft.rfft(ref, size) * np.conj(np.fft.rfft(x, size))
        corr = np.fft.irfft(spectrum, size)[: d + 1]
        cum = np.concatenate([[0.0], np.cumsum(ref * ref)])
        ref_power = cum[n : n + d + 1] - cum[: d + 1]
        mic_power = float(x @ x)
        if self._corr is None:
            self._corr, self._ref_power, self._mic_power = corr, ref_power, mic_power
        else:
            self._corr = _CORR_FORGET * self._corr + corr
            self._ref_power = _CORR_FORGET * self._ref_power + ref_power
            self._mic_power = _CORR_FORGET * self._mic_power + mic_power
        ncc = np.abs(self._corr) / np.sqrt(self._ref_power * self._mic_power + 1e-9)
        return d - int(np.argmax(ncc))


class LinearEcho:
    """The echo path as a linear filter, learnt while the robot talks alone, so that the
    user's voice can be heard under the robot's (pure numpy; one per microphone stream).

    The gate above replaces a chunk the echo dominates with noise: right for the voice
    detector (the robot's voice never starts speech), but the user's first syllable said over
    the robot goes with it ("Stop" heard as "up"). This filter predicts the echo sample by
    sample, ``taps_ms`` of the reference from ``margin_ms`` before the gate's delay on, and
    subtracts it: the residual keeps the user's waveform. It is a frequency-domain normalised
    LMS filter (one block per chunk, its gradient constrained to the filter's length),
    adapted only on chunks the gate scores as the robot's voice alone (at least
    :data:`_ADAPT_SCORE`) and, once it cancels, only on those whose residual is near what it
    usually leaves of the echo it predicts (plus the room's noise): a residual far above that
    is the user talking over the robot (double talk), assumed for the next 320 ms too.
    ``converged``: its echo return loss enhancement (mic over residual energy on the chunks
    it adapts on that are loud enough above the room's noise to show it, smoothed) is at
    least :data:`_CONVERGED_DB`. The filter follows the gate's delay when that moves by more
    than ``margin_ms`` and keeps what it learnt through silences (the room does not change
    while nobody speaks).
    """

    def __init__(
        self, reference: EchoReference, *, taps_ms: float = 128.0, margin_ms: float = 20.0
    ) -> None:
        self.reference = reference
        rate = reference.sample_rate
        self._taps = round(taps_ms * rate / 1000)
        self._margin = round(margin_ms * rate / 1000)
        self.reset()

    def reset(self) -> None:
        """Forget the echo path."""
        self._h = np.zeros(self._taps)
        self._h_spectrum: np.ndarray | None = None  # rfft of _h, until _h changes
        self._lag: int | None = None  # reference samples before the filter's first tap
        self._power: np.ndarray | None = None  # reference power per bin, smoothed
        self.erle_db = 0.0
        self.double_talk = False  # the user may be talking over the robot (see process)
        self._hold = 0  # chunks double talk is still assumed for
        self._doubted = 0  # chunks in a row taken for double talk while the gate heard echo

    @property
    def converged(self) -> bool:
        return self.erle_db >= _CONVERGED_DB

    def process(
        self, mic: np.ndarray, stamp_ns: int, delay: int, adapt: bool, noise: float = 0.0
    ) -> np.ndarray:
        """The residual (float64) of ``mic`` (float64, first sample at ``stamp_ns``) once the
        echo the filter predicts is taken out; ``delay``: the gate's estimate (samples);
        ``adapt``: the chunk is the robot's voice alone as far as the gate can tell;
        ``noise``: the room's noise energy over a chunk (a residual within the echo usually
        left over plus this is no double talk)."""
        n, taps = len(mic), self._taps
        lag = max(delay - self._margin, 0)
        if self._lag is None:
            self._lag = lag
        elif abs(lag - self._lag) > self._margin:  # the path moved: keep the taps aligned
            shift, shifted = lag - self._lag, np.zeros(taps)
            if 0 <= shift < taps:  # tap k is now what tap k + shift was
                shifted[: taps - shift] = self._h[shift:]
            elif -taps < shift < 0:
                shifted[-shift:] = self._h[: taps + shift]
            self._h, self._h_spectrum, self._lag = shifted, None, lag
        rate = self.reference.sample_rate
        start_ns = stamp_ns - (self._lag + taps - 1) * NS_PER_S // rate
        ref = self.reference.window(start_ns, n + taps - 1).astype(np.float64)
        size = 1 << (n + taps - 1).bit_length()
        spectrum = np.fft.rfft(ref, size)
        if self._h_spectrum is None or len(self._h_spectrum) != len(spectrum):
            self._h_spectrum = np.fft.rfft(self._h, size)
        predicted = np.fft.irfft(spectrum * self._h_spectrum, size)[taps - 1 : taps - 1 + n]
        residual = mic - predicted
        power = np.abs(spectrum) ** 2 / n
        self._power = power if self._power is None else 0.7 * self._power + 0.3 * power
        mic_energy, left = float(mic @ mic) + 1.0, float(residual @ residual) + 1.0
        enhancement = 10.0 * math.log10(mic_energy / left)
        usual = float(predicted @ predicted) * 10 ** (-self.erle_db / 10) + noise
        if self.converged and left > 10 ** (_DOUBLE_TALK_DB / 10) * usual:
            self._hold = _HOLD_CHUNKS  # and the user's quieter sounds around it
        else:
            self._hold = max(self._hold - 1, 0)
        self.double_talk = self._hold > 0
        # The robot talking on through a second of "double talk" is a path that changed (the
        # robot turned, a door opened), not a user: the robot stops on a barge-in. Learn anew.
        self._doubted = self._doubted + 1 if adapt and self.double_talk else 0
        if self._doubted >= _RELEARN_CHUNKS:
            self.erle_db, self.double_talk, self._doubted, self._hold = 0.0, False, 0, 0
        if adapt and not self.double_talk:
            error = np.zeros(size)
            error[taps - 1 : taps - 1 + n] = residual
            norm = self._power + _REGULARISE * float(self._power.mean()) + 1e-9
            step = np.fft.irfft(np.fft.rfft(error) * np.conj(spectrum) / norm, size)
            self._h += _STEP * step[:taps] / n
            self._h_spectrum = None
            if mic_energy > 10 ** ((_CONVERGED_DB + _ABOVE_NOISE_DB) / 10) * noise:
                # only an echo well above the room's noise can show how much is cancelled
                self.erle_db += _ERLE_SMOOTH * (enhancement - self.erle_db)
        return residual


def _pcm(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


def _learn(
    gain: np.ndarray | None,
    learnt: int,
    mic_bands: np.ndarray,
    predicted: np.ndarray,
    echo_dominates: bool,
) -> tuple[np.ndarray, int]:
    """One step of an echo path power gain per band, learnt from chunks the echo dominates:
    an upper envelope (fast up, slow down), since an echo underestimated leaks through; a band
    far above its prediction climbs slowly (:data:`_PLAUSIBLE_RISE`)."""
    if gain is None:
        gain = np.full(_BANDS, _INITIAL_GAIN)
    if not echo_dominates or predicted.sum() <= 0:
        return gain, learnt
    ratio = np.log((mic_bands + 1e-3) / (predicted + 1e-3))
    if not learnt:
        return np.exp(ratio), 1
    log_gain = np.log(gain)
    rate = np.where(ratio > log_gain, _LEARN_UP, _LEARN_DOWN)
    step = rate * (ratio - log_gain)
    step = np.where(ratio - log_gain > _PLAUSIBLE_RISE, np.minimum(step, _SLOW_CLIMB), step)
    return np.exp(log_gain + step), learnt + 1


def _fit_share(x: np.ndarray, ref: np.ndarray) -> float:
    """Share of ``x``'s energy explained by the best-scaled ``ref`` (0..1)."""
    rr, xx = float(ref @ ref), float(x @ x)
    if rr <= 0 or xx <= 0:
        return 0.0
    return float((x @ ref) ** 2 / (rr * xx))


# Frequency bands of the echo estimate: equal widths (a 40 ms chunk at 16 kHz: 400 Hz each).
_BANDS = 20
# The room's noise: each bin's power smoothed with this weight of the past (about 5 chunks),
# its minimum rising at most _FLOOR_RISE a chunk heard while nothing plays (about 1 dB a
# second at 40 ms chunks), and what that minimum is of the mean for noise: 0.62 for these two
# figures (simulated over 6,000 chunks: a bin's power in Gaussian noise is exponentially
# distributed whatever the noise's colour, so the figure holds for any steady noise).
_FLOOR_SMOOTH = 0.8
_FLOOR_RISE = 1.01
_FLOOR_BIAS = 0.62
# Analysis frames: 20 ms (at 16 kHz) with a Hann window, hop 10 ms.
_FRAME = 320
_WINDOW = np.hanning(_FRAME + 1)[:-1]
# Power kept from the reference one hop (10 ms) further back: reverberation with an RT60 of
# 0.45 s loses 1.3 dB per 10 ms (0.74 in power); the decay assumed is slower (safer).
_REVERB_DECAY = 0.77
# Echo path gain assumed before any is learnt: as loud as the played signal (0 dB).
_INITIAL_GAIN = 1.0
# The gain is learnt from chunks a scaled copy of the reference explains this well (echo
# alone scores 0.5-0.9 through a room; double talk at equal levels about 0.2).
_LEARN_FIT = 0.2
# A chunk whose direct reference is at least this share of all it can hear (the reverberant
# sum) is an onset: it teaches the direct gain.
_ONSET_SHARE = 0.5
# Learning rates of the gain (log domain, per chunk): up when the echo is louder than
# predicted, down when quieter.
_LEARN_UP = 0.5
_LEARN_DOWN = 0.05
# A band heard more than this above what its gain predicts is not taken for a louder echo
# path at once: a chunk the echo dominates overall can hold the user's voice in a few bands
# (the "s" of "Stop" lies above 4 kHz, where the robot's vowels are quiet). Learnt as echo, it
# raised the gain there 25 dB in two chunks, and since the gain comes down at _LEARN_DOWN, the
# user's next 120 ms were taken for echo (the bundled session). Such a band climbs at most
# _SLOW_CLIMB a chunk, so a path that really got that much louder is still learnt, over a
# second or so.
_PLAUSIBLE_RISE = math.log(10.0)  # 10 dB, in log power
_SLOW_CLIMB = math.log(10.0) / 20  # 0.5 dB
# The linear canceller (LinearEcho): adapted on chunks the gate scores at least this (the
# robot's voice alone); step size and regularisation of its normalised LMS; converged from
# this echo return loss enhancement on (measured on chunks at least that and
# _ABOVE_NOISE_DB above the room's noise); the weight of a chunk in that figure; and, once
# converged, a chunk whose residual is this far above the usual is taken for double talk,
# unless that lasts this many chunks (1 s of 40 ms chunks) while the gate hears the robot,
# and so are the next few chunks (the user's quieter sounds between the loud ones).
_ADAPT_SCORE = 0.9
_STEP = 0.5
_REGULARISE = 0.01
_CONVERGED_DB = 20.0
_ERLE_SMOOTH = 0.1
_DOUBLE_TALK_DB = 10.0
_RELEARN_CHUNKS = 25
_HOLD_CHUNKS = 8
_ABOVE_NOISE_DB = 6.0


def _frames(signal: np.ndarray) -> np.ndarray:
    """Hann-windowed frames of :data:`_FRAME` samples every half frame."""
    hop = _FRAME // 2
    count = (len(signal) - _FRAME) // hop + 1
    index = np.arange(_FRAME)[None, :] + hop * np.arange(count)[:, None]
    return signal[index] * _WINDOW


def _power(frames: np.ndarray) -> np.ndarray:
    return np.abs(np.fft.rfft(frames, axis=-1)) ** 2


def _band_edges(bins: int) -> np.ndarray:
    """First rfft bin of each of the :data:`_BANDS` bands."""
    return np.linspace(0, bins, _BANDS + 1).astype(np.int64)[:-1]


def _bands(power: np.ndarray) -> np.ndarray:
    """Band powers (last axis: rfft bins) summed into :data:`_BANDS` bands."""
    return np.add.reduceat(power, _band_edges(power.shape[-1]), axis=-1)


def _band_of_bin(bins: int) -> np.ndarray:
    """The band of every rfft bin."""
    return np.searchsorted(_band_edges(bins), np.arange(bins), side="right") - 1
