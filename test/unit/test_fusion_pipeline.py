"""The fusion pipeline (tier 1, no ROS) with scripted engines: preroll, the forced cut at
``vad.max_utterance_s``, stream restarts, the echo wait, finals handed over late, the vision
rate, the association window, the onset frame, the decision by the final's words and
freshness at the vision rate."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from omniflow.core.association import Decision
from omniflow.core.fusion_events import (
    Activity,
    SceneEvent,
    StageError,
    TranscriptEvent,
    VoiceActivityEvent,
)
from omniflow.core.fusion_pipeline import (
    MAX_FRAME_LAG_NS,
    MAX_REFERENCE_WAIT_NS,
    MAX_TURN_YIELD_NS,
    PREROLL_NS,
    SILENCE_IDLE_EVERY_NS,
    SILENCE_PAUSE_NS,
    EchoStage,
    FusionConfig,
    FusionEngines,
    FusionPipeline,
)
from omniflow.core.scene_bias import SceneBias
from omniflow.core.timing import CHUNK_SAMPLES, NS_PER_MS, NS_PER_S, NS_PER_SAMPLE
from omniflow.core.tokens import Modality
from omniflow.errors import EngineError

CHUNK_NS = CHUNK_SAMPLES * NS_PER_SAMPLE  # 40 ms
T0 = 1_000 * NS_PER_S
LOUD, QUIET = 8000, 0


# ----------------------------------------------------------------------------- fakes
@dataclass(frozen=True)
class Boundary:
    kind: str
    stamp_ns: int


class ScriptedVad:
    """Loud chunks are speech: ``confirm`` loud chunks in a row start it (stamped at the
    first), ``hang`` quiet ones end it (stamped at the end of the last loud one)."""

    def __init__(self, confirm: int = 3, hang: int = 5) -> None:
        self.confirm, self.hang = confirm, hang
        self.resets = 0
        self._reset_state()

    def _reset_state(self) -> None:
        self.is_speech = False
        self._run: list[int] = []
        self._quiet = 0
        self._last_loud_end = 0

    def reset(self) -> None:
        self.resets += 1
        self._reset_state()

    def process(self, samples: np.ndarray, stamp_ns: int) -> list[Boundary]:
        loud = int(np.abs(samples).max()) >= LOUD
        end_ns = stamp_ns + len(samples) * NS_PER_SAMPLE
        if not self.is_speech:
            self._run = [*self._run, stamp_ns] if loud else []
            if len(self._run) >= self.confirm:
                self.is_speech, self._quiet, self._last_loud_end = True, 0, end_ns
                return [Boundary("start", self._run[0])]
            return []
        if loud:
            self._quiet, self._last_loud_end = 0, end_ns
            return []
        self._quiet += 1
        if self._quiet >= self.hang:
            self.is_speech, self._run = False, []
            return [Boundary("end", self._last_loud_end)]
        return []


@dataclass(frozen=True)
class Final:
    text: str
    confidence: float = 0.9
    words: tuple = ()


class ScriptedRecognizer:
    """Keeps what each utterance was fed; a partial per chunk; finals held while ``hold``."""

    def __init__(self) -> None:
        self.active = False
        self.utterances: list[dict] = []
        self.ended: list[Final] = []
        self.hold = False
        self.fail_next_poll = False
        self.pausing = False

    def start(self, stamp_ns: int) -> None:
        self.active = True
        self.utterances.append({"start_ns": stamp_ns, "chunks": [], "prompts": []})

    def set_prompt(self, prompt: str | None) -> None:
        """Records each prompt with the chunks fed before it."""
        utterance = self.utterances[-1]
        utterance["prompts"].append((prompt, len(utterance["chunks"])))

    def feed(self, samples: np.ndarray) -> str | None:
        chunks = self.utterances[-1]["chunks"]
        chunks.append(samples)
        return f"u{len(self.utterances)} {len(chunks)}"

    def end(self) -> None:
        self.active = False
        self.ended.append(Final(f"utterance {len(self.utterances)}"))

    def poll_final(self) -> Final | None:
        if self.fail_next_poll:
            self.fail_next_poll = False
            if self.ended:
                self.ended.pop(0)  # the decoder crashed on this one: its final is gone
            raise EngineError("decoder crashed")
        if self.hold or not self.ended:
            return None
        return self.ended.pop(0)


@dataclass(frozen=True)
class Seen:
    kind: str
    region: str | None = None
    value: object = None


@dataclass(frozen=True)
class Encoded:
    code: int
    observations: tuple

    @property
    def summary(self) -> tuple:
        return tuple((o.kind, o.region) for o in self.observations)


class ScriptedVision:
    def __init__(self) -> None:
        self.stamps: list[int] = []

    def encode(self, rgb: np.ndarray, stamp_ns: int) -> Encoded:
        self.stamps.append(stamp_ns)
        return Encoded(len(self.stamps), (Seen("face"), Seen("hand", "top-left")))


@dataclass
class PlayedReference:
    blocks: list[tuple[int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def newest_end_ns(self) -> int:
        return max((end for _, end in self.blocks), default=0)

    def add(self, stamp_ns: int, samples: np.ndarray) -> None:
        self.blocks.append((stamp_ns, stamp_ns + len(samples) * NS_PER_SAMPLE))


@dataclass(frozen=True)
class EchoOut:
    samples: np.ndarray
    echo_score: float
    echo: bool
    delay_ms: float
    heard: np.ndarray | None = None


class PassGate:
    """Leaves the audio as it is; scores 1.0 (echo) where the reference covers the chunk."""

    def __init__(self, reference: PlayedReference) -> None:
        self.reference = reference
        self.resets = 0
        self.seen: list[int] = []

    def process(self, samples: np.ndarray, stamp_ns: int) -> EchoOut:
        self.seen.append(stamp_ns)
        covered = any(s <= stamp_ns < e for s, e in self.reference.blocks)
        return EchoOut(
            samples, 1.0 if covered else math.nan, covered, 20.0 if covered else math.nan
        )

    def reset(self) -> None:
        self.resets += 1


# ----------------------------------------------------------------------------- driving
def config(**overrides) -> FusionConfig:
    values = dict(
        ring_capacity=128,
        window_before_ns=80 * NS_PER_MS,
        window_after_ns=120 * NS_PER_MS,
        slice_ns=40 * NS_PER_MS,
        max_utterance_ns=15 * NS_PER_S,
        vision_rate_hz=5.0,
        echo_wait_ns=60 * NS_PER_MS,
        max_future_ns=NS_PER_S,
    )
    values.update(overrides)
    return FusionConfig(**values)


def make(
    vad: ScriptedVad | None = None, *, echo: bool = False, vision: bool = False, **overrides
) -> tuple[FusionPipeline, FusionEngines]:
    engines = FusionEngines(
        vad or ScriptedVad(), ScriptedRecognizer(), ScriptedVision() if vision else None
    )
    if echo:
        reference = PlayedReference()
        engines.echo = EchoStage(PassGate(reference), reference, ScriptedVad())
    return FusionPipeline(config(**overrides), engines, clock=lambda: 0), engines


def chunk(level: int, index: int = 0) -> np.ndarray:
    """A chunk at ``level`` whose first sample tells its index (to follow it through)."""
    samples = np.full(CHUNK_SAMPLES, level, dtype=np.int16)
    samples[0] = index
    return samples


def feed(
    pipeline: FusionPipeline, levels: list[int], start_ns: int = T0, frames_every_ns: int = 0
) -> list:
    """Push one chunk per level from ``start_ns`` and step at each chunk's end; frames (a
    blank image) every ``frames_every_ns``; return every event."""
    events = []
    next_frame = start_ns
    for i, level in enumerate(levels):
        stamp = start_ns + i * CHUNK_NS
        frame = None
        if frames_every_ns and next_frame <= stamp:
            frame = (next_frame, np.zeros((4, 4, 3), np.uint8))
            next_frame += frames_every_ns
        events += pipeline.step(stamp + CHUNK_NS, audio=[(stamp, chunk(level, i))], frame=frame)
    return events


def of(events: list, kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


def activity(events: list, kind: Activity) -> list[VoiceActivityEvent]:
    return [e for e in of(events, VoiceActivityEvent) if e.kind == kind]


def speech_activity(events: list) -> list[VoiceActivityEvent]:
    """The voice-activity events about speech (START, ONGOING, END): all but SILENCE."""
    return [e for e in of(events, VoiceActivityEvent) if e.kind != Activity.SILENCE]


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("confirm", [1, 3, 8])
def test_the_recogniser_gets_the_speech_from_its_first_chunk_through_the_preroll(confirm):
    pipeline, engines = make(ScriptedVad(confirm=confirm))
    events = feed(pipeline, [QUIET] * 20 + [LOUD] * 20 + [QUIET] * 10)
    first_loud = T0 + 20 * CHUNK_NS
    (start,) = activity(events, Activity.START)
    assert start.stamp_ns == first_loud and start.utterance_id == 1
    assert start.speech_s == pytest.approx(confirm * CHUNK_NS / NS_PER_S)
    (utterance,) = engines.recognizer.utterances
    assert utterance["start_ns"] == first_loud
    fed = [int(c[0]) for c in utterance["chunks"]]
    assert fed[:20] == list(range(20, 40))  # every loud chunk, in order, none twice
    (final,) = [e for e in of(events, TranscriptEvent) if e.final]
    assert (final.utterance_id, final.start_ns) == (1, first_loud)
    assert final.end_ns == T0 + 40 * CHUNK_NS
    assert pipeline.stats.speech_starts == pipeline.stats.speech_ends == 1


def test_the_recogniser_hears_a_lead_in_before_the_onset_but_not_the_last_utterance():
    pipeline, engines = make(ScriptedVad(confirm=3, hang=5), lead_in_ns=300 * NS_PER_MS)
    # speech at chunks 20-29 (end stamped at 30), a pause of 5 chunks, speech again from 35
    feed(pipeline, [QUIET] * 20 + [LOUD] * 10 + [QUIET] * 5 + [LOUD] * 10 + [QUIET] * 10)
    first, second = engines.recognizer.utterances
    # 300 ms before chunk 20 is inside chunk 12: from there on, each chunk once, in order
    assert [int(c[0]) for c in first["chunks"]][:12] == list(range(12, 24))
    assert first["start_ns"] == T0 + 12 * CHUNK_NS
    # only 5 chunks of pause before the second: its lead-in stops at the first's end
    assert [int(c[0]) for c in second["chunks"]][:6] == list(range(30, 36))
    assert second["start_ns"] == T0 + 30 * CHUNK_NS


def test_a_start_older_than_the_preroll_feeds_what_the_preroll_kept():
    confirm = PREROLL_NS // CHUNK_NS + 5
    pipeline, engines = make(ScriptedVad(confirm=confirm))
    feed(pipeline, [LOUD] * (confirm + 2))
    (utterance,) = engines.recognizer.utterances
    assert T0 < utterance["start_ns"] <= T0 + (confirm - PREROLL_NS // CHUNK_NS) * CHUNK_NS


@pytest.mark.parametrize("max_s", [2, 3])
def test_speech_longer_than_max_utterance_is_cut_and_still_gets_its_final(max_s):
    pipeline, engines = make(ScriptedVad(confirm=1), max_utterance_ns=max_s * NS_PER_S)
    events = feed(pipeline, [LOUD] * (max_s * 25 + 10) + [QUIET] * 10)
    (cut,) = [e for e in activity(events, Activity.END) if e.cut]
    assert cut.utterance_id == 1
    assert cut.stamp_ns - T0 > max_s * NS_PER_S
    assert cut.stamp_ns - T0 <= max_s * NS_PER_S + CHUNK_NS
    assert pipeline.stats.forced_ends == 1
    assert engines.vad.resets == 1
    finals = [e for e in of(events, TranscriptEvent) if e.final]
    assert [f.utterance_id for f in finals] == [1, 2]  # the cut one, then the rest
    assert finals[0].end_ns == cut.stamp_ns
    starts = activity(events, Activity.START)
    assert [s.utterance_id for s in starts] == [1, 2]
    assert starts[1].stamp_ns == cut.stamp_ns  # the VAD starts afresh on the next chunk


@pytest.mark.parametrize("speaking", [True, False])
def test_a_stream_that_goes_back_in_time_ends_speech_and_starts_afresh(speaking):
    pipeline, engines = make(ScriptedVad(confirm=2), echo=True)
    levels = [QUIET] * 5 + [LOUD] * 10 + ([] if speaking else [QUIET] * 10)
    events = feed(pipeline, levels)
    last_end = T0 + len(levels) * CHUNK_NS
    resets = engines.vad.resets
    later = feed(pipeline, [LOUD] * 5 + [QUIET] * 10, start_ns=T0 - 10 * NS_PER_S)
    ends = activity(later, Activity.END)
    if speaking:
        assert ends[0].stamp_ns == last_end and ends[0].utterance_id == 1
    assert engines.vad.resets == resets + 1
    assert engines.echo.gate.resets == 1 and engines.echo.raw_vad.resets == 1
    (start,) = activity(later, Activity.START)
    assert start.utterance_id == 2 and start.stamp_ns == T0 - 10 * NS_PER_S
    # the preroll held nothing of the old stream
    assert engines.recognizer.utterances[-1]["start_ns"] == T0 - 10 * NS_PER_S
    assert len(activity(events, Activity.START)) == 1


class HalfLevel:
    """A noise suppressor that halves every sample (and counts its resets)."""

    def __init__(self) -> None:
        self.resets = 0

    def process(self, samples: np.ndarray) -> np.ndarray:
        return samples // 2

    def reset(self) -> None:
        self.resets += 1


def test_the_suppressor_cleans_each_chunk_for_the_vad_and_the_recogniser_and_restarts_with_it():
    pipeline, engines = make(ScriptedVad(confirm=2))
    engines.denoise = HalfLevel()
    # LOUD halved is still loud for the scripted VAD; 2 * LOUD halved is LOUD exactly
    feed(pipeline, [QUIET] * 5 + [2 * LOUD] * 10 + [QUIET] * 10)
    (utterance,) = engines.recognizer.utterances
    assert {int(c[1]) for c in utterance["chunks"][:10]} == {LOUD}  # what the VAD judged too
    feed(pipeline, [QUIET] * 3, start_ns=T0 - 10 * NS_PER_S)  # the stream went back
    assert engines.denoise.resets == 1


class ResidualGate(PassGate):
    """Hands the VAD the chunk as it is and the recogniser a copy marked as the linear
    canceller's residual (its second sample 7)."""

    def process(self, samples: np.ndarray, stamp_ns: int) -> EchoOut:
        out = super().process(samples, stamp_ns)
        heard = samples.copy()
        heard[1] = 7
        return EchoOut(out.samples, out.echo_score, out.echo, out.delay_ms, heard)


def test_the_recogniser_hears_the_echo_stages_residual_from_the_preroll_on():
    pipeline, engines = make(ScriptedVad(confirm=3), echo=True)
    reference = engines.echo.reference
    engines.echo = EchoStage(ResidualGate(reference), reference, ScriptedVad())
    feed(pipeline, [QUIET] * 5 + [LOUD] * 10 + [QUIET] * 10)
    (utterance,) = engines.recognizer.utterances
    assert [int(c[0]) for c in utterance["chunks"]][:10] == list(range(5, 15))
    assert {int(c[1]) for c in utterance["chunks"]} == {7}


@pytest.mark.parametrize("back_s", [2, 10, 3600])
def test_an_utterance_cut_by_the_clock_jumping_back_still_gets_its_final(back_s):
    pipeline, engines = make(ScriptedVad(confirm=2))
    events = feed(pipeline, [QUIET] * 5 + [LOUD] * 10)  # the bag loops mid-utterance
    cut_at = T0 + 15 * CHUNK_NS
    events += feed(pipeline, [QUIET] * 10, start_ns=cut_at - back_s * NS_PER_S)
    (end,) = activity(events, Activity.END)
    assert (end.utterance_id, end.stamp_ns) == (1, cut_at)
    (final,) = [e for e in of(events, TranscriptEvent) if e.final]
    assert (final.utterance_id, final.text) == (1, "utterance 1")
    assert (final.start_ns, final.end_ns) == (T0 + 5 * CHUNK_NS, cut_at)
    assert pipeline.stats.speech_starts == pipeline.stats.speech_ends == 1
    assert not engines.recognizer.active  # the next utterance starts a new one


def test_a_final_the_recogniser_fails_on_after_a_clock_jump_is_marked_abandoned():
    pipeline, engines = make(ScriptedVad(confirm=2))
    engines.recognizer.fail_next_poll = True
    feed(pipeline, [QUIET] * 5 + [LOUD] * 10)
    events = feed(pipeline, [QUIET] * 5, start_ns=T0 - 10 * NS_PER_S)
    (final,) = [e for e in of(events, TranscriptEvent) if e.final]
    assert (final.utterance_id, final.text, final.confidence) == (1, "", 0.0)
    assert final.end_ns == T0 + 15 * CHUNK_NS
    assert pipeline.stats.finals_abandoned == 1 and pipeline.stats.engine_errors == 1


def test_stamps_a_little_out_of_order_are_no_restart():
    pipeline, engines = make()
    feed(pipeline, [QUIET] * 10)
    feed(pipeline, [QUIET] * 3, start_ns=T0 + 9 * CHUNK_NS - 500 * NS_PER_MS)
    assert engines.vad.resets == 0


@pytest.mark.parametrize("wait_ms", [0, 60, 200])
def test_a_chunk_waits_for_its_played_reference_while_the_robot_speaks(wait_ms):
    pipeline, engines = make(echo=True, echo_wait_ns=wait_ms * NS_PER_MS)
    gate = engines.echo.gate
    played = np.zeros(CHUNK_SAMPLES * 5, np.int16)  # 200 ms of the robot's voice
    pipeline.step(T0, played=[(T0, played)])
    mic = T0 + 5 * CHUNK_NS  # the 40 ms right after it
    mic_end = mic + CHUNK_NS
    pipeline.step(mic_end + 10 * NS_PER_MS, audio=[(mic, chunk(QUIET))])
    assert gate.seen == ([] if wait_ms > 10 else [mic])
    if wait_ms > 10:
        assert pipeline.pending_audio == 1
        # its reference arrives: the chunk goes through, as the robot's voice
        pipeline.step(mic_end + 20 * NS_PER_MS, played=[(mic, chunk(QUIET))])
        assert gate.seen == [mic] and pipeline.stats.echo_chunks == 1
    assert pipeline.stats.played_blocks == (2 if wait_ms > 10 else 1)


@pytest.mark.parametrize("wait_ms", [0, 60, 200])
def test_a_chunk_waits_no_longer_than_the_echo_wait(wait_ms):
    pipeline, engines = make(echo=True, echo_wait_ns=wait_ms * NS_PER_MS)
    pipeline.step(T0, played=[(T0, np.zeros(CHUNK_SAMPLES * 5, np.int16))])
    mic = T0 + 5 * CHUNK_NS
    mic_end = mic + CHUNK_NS
    pipeline.push_audio(mic, chunk(QUIET))
    for late_ms in range(0, 300, 10):
        pipeline.step(mic_end + late_ms * NS_PER_MS)
        if engines.echo.gate.seen:
            break
    assert engines.echo.gate.seen == [mic]
    assert late_ms == wait_ms
    assert pipeline.stats.echo_chunks == 0  # no reference came: not taken for the robot


def test_chunks_held_at_the_intake_wait_for_their_reference_though_the_clock_moved_on():
    """The node was kept from its callbacks for 800 ms while the robot spoke: the microphone
    and the played audio come in interleaved, each chunk before the block that covers it,
    every one long past its end by the clock. Each waits for its block (a wait by stamps
    alone let them through without their echo removed)."""
    pipeline, engines = make(echo=True)
    pipeline.step(T0, played=[(T0, np.zeros(CHUNK_SAMPLES * 5, np.int16))])
    mics = [T0 + (5 + k) * CHUNK_NS for k in range(4)]
    resumed = mics[-1] + 800 * NS_PER_MS
    for k, mic in enumerate(mics):
        now = resumed + k * 4 * NS_PER_MS
        pipeline.step(now, audio=[(mic, chunk(QUIET, k))])
        assert pipeline.pending_audio == 1
        pipeline.step(now + 2 * NS_PER_MS, played=[(mic, chunk(QUIET))])
    assert engines.echo.gate.seen == mics
    assert pipeline.stats.echo_chunks == 4  # each with its reference: the robot's voice


def test_a_chunk_waits_for_its_reference_at_most_the_cap_after_it_came():
    """Played blocks keep coming, all stamped before the chunk (a speech node whose stamps run
    behind the microphone's): the chunk waits MAX_REFERENCE_WAIT_NS after it came, no more."""
    pipeline, engines = make(echo=True)
    pipeline.step(T0, played=[(T0, np.zeros(CHUNK_SAMPLES * 5, np.int16))])
    mic = T0 + 5 * CHUNK_NS
    came = mic + CHUNK_NS + 10 * NS_PER_MS
    pipeline.step(came, audio=[(mic, chunk(QUIET))])
    behind = (T0, np.zeros(CHUNK_SAMPLES // 2, np.int16))
    waited_ms = 0
    while not engines.echo.gate.seen and waited_ms < 2000:
        waited_ms += 10
        pipeline.step(came + waited_ms * NS_PER_MS, played=[behind])
    assert waited_ms * NS_PER_MS == MAX_REFERENCE_WAIT_NS


def test_chunks_do_not_wait_when_the_robot_is_silent():
    pipeline, engines = make(echo=True)
    pipeline.step(T0, played=[(T0, np.zeros(CHUNK_SAMPLES, np.int16))])
    mic = T0 + 2 * NS_PER_S  # long after the robot stopped
    pipeline.step(mic + CHUNK_NS, audio=[(mic, chunk(QUIET))])
    assert engines.echo.gate.seen == [mic]


def test_chunks_of_a_burst_while_the_robot_was_silent_wait_for_the_answer_queued_behind():
    """The node was kept from its callbacks for 800 ms while the robot was silent, and an
    answer began meanwhile: its microphone chunks come in a burst, all before the played
    blocks (one subscription's queue drained first). Each waits for them, the chunks before
    the answer too (nothing can tell them apart yet)."""
    pipeline, engines = make(echo=True)
    feed(pipeline, [QUIET] * 10)  # on time, the robot silent
    stamp = T0 + 10 * CHUNK_NS
    mics = [stamp + k * CHUNK_NS for k in range(4)]
    now = mics[-1] + CHUNK_NS + 800 * NS_PER_MS
    for k, mic in enumerate(mics):
        pipeline.step(now + 2 * k * NS_PER_MS, audio=[(mic, chunk(QUIET, 10 + k))])
    assert engines.echo.gate.seen[10:] == [] and pipeline.pending_audio == 4
    answer = (mics[2], np.zeros(2 * CHUNK_SAMPLES, np.int16))  # over the last two chunks
    pipeline.step(now + 10 * NS_PER_MS, played=[answer])
    assert engines.echo.gate.seen[10:] == mics
    assert pipeline.stats.echo_chunks == 2  # the answer's two, with their reference


def test_a_burst_of_chunks_with_nothing_behind_them_waits_the_echo_wait_once():
    pipeline, engines = make(echo=True)
    feed(pipeline, [QUIET] * 10)  # on time, the robot silent
    stamp = T0 + 10 * CHUNK_NS
    now = stamp + CHUNK_NS + 800 * NS_PER_MS
    for k in range(3):
        pipeline.step(now + 2 * k * NS_PER_MS, audio=[(stamp + k * CHUNK_NS, chunk(QUIET))])
    pipeline.step(now + 4 * NS_PER_MS + 59 * NS_PER_MS)
    assert engines.echo.gate.seen[10:] == []
    pipeline.step(now + 4 * NS_PER_MS + 60 * NS_PER_MS)
    assert len(engines.echo.gate.seen[10:]) == 3 and pipeline.stats.echo_chunks == 0


def test_a_link_that_got_slower_holds_no_chunk_after_the_first_late_one():
    """Chunks that come late at the stream's pace (a network microphone slowed down) have
    nothing queued behind them: only the first waits, for the echo wait."""
    pipeline, engines = make(echo=True)
    feed(pipeline, [QUIET] * 10)  # on time, the robot silent
    stamp = T0 + 10 * CHUNK_NS
    slower = 200 * NS_PER_MS
    through = []
    for k in range(5):
        mic = stamp + k * CHUNK_NS
        pipeline.step(mic + CHUNK_NS + slower, audio=[(mic, chunk(QUIET))])
        through.append(len(engines.echo.gate.seen) - 10)
    assert through == [0, 0, 3, 4, 5]  # the first held to the step 80 ms after it came


def test_finals_handed_over_late_keep_their_utterance_and_order():
    pipeline, engines = make(ScriptedVad(confirm=1, hang=2))
    engines.recognizer.hold = True
    speech = [LOUD] * 5 + [QUIET] * 5
    events = feed(pipeline, speech * 3)
    assert not [e for e in of(events, TranscriptEvent) if e.final]
    assert pipeline.finals_due == 3
    partial_ids = [e.utterance_id for e in of(events, TranscriptEvent)]
    assert partial_ids == sorted(partial_ids) and set(partial_ids) == {1, 2, 3}
    ends = activity(events, Activity.END)
    engines.recognizer.hold = False
    later = feed(pipeline, [QUIET] * 3, start_ns=T0 + 30 * CHUNK_NS)
    finals = [e for e in of(later, TranscriptEvent) if e.final]
    assert [(f.utterance_id, f.text) for f in finals] == [
        (1, "utterance 1"),
        (2, "utterance 2"),
        (3, "utterance 3"),
    ]
    assert [f.end_ns for f in finals] == [e.stamp_ns for e in ends]
    assert [f.start_ns for f in finals] == [T0 + i * 10 * CHUNK_NS for i in range(3)]
    assert pipeline.stats.finals == 3 and pipeline.finals_due == 0


def test_a_failing_final_is_counted_and_only_that_utterance_is_abandoned():
    pipeline, engines = make(ScriptedVad(confirm=1, hang=2))
    engines.recognizer.hold = True
    feed(pipeline, ([LOUD] * 3 + [QUIET] * 3) * 2)
    engines.recognizer.hold = False
    engines.recognizer.fail_next_poll = True
    events = feed(pipeline, [QUIET] * 3, start_ns=T0 + 12 * CHUNK_NS)
    (error,) = of(events, StageError)
    assert error.stage == "audio" and isinstance(error.error, EngineError)
    assert pipeline.stats.engine_errors == 1
    finals = [(e.utterance_id, e.text) for e in of(events, TranscriptEvent) if e.final]
    assert finals == [(1, ""), (2, "utterance 2")]  # the first abandoned, not lost
    assert pipeline.stats.finals_abandoned == 1 and pipeline.stats.finals == 1


def test_utterance_ids_go_on_from_the_first_id_given():
    pipeline, engines = make(ScriptedVad(confirm=1))
    pipeline = FusionPipeline(config(), engines, first_utterance_id=7, clock=lambda: 0)
    events = feed(pipeline, [LOUD] * 3 + [QUIET] * 6)
    assert {e.utterance_id for e in speech_activity(events)} == {7}


def test_diagnostics_say_where_the_vision_models_run_and_why():
    pipeline, engines = make(vision=True)
    assert not any(k.startswith("vision.") for k in pipeline.diagnostics())  # nothing to say
    engines.vision.diagnostics = lambda: {"backend": "cpu", "backend_reason": "CPU: no TPU"}
    values = pipeline.diagnostics()
    assert values["vision.backend"] == "cpu" and values["vision.backend_reason"] == "CPU: no TPU"


# 15 fps offered: every 14th, 3rd and 2nd frame pass the gate (90 % of the period).
@pytest.mark.parametrize(("rate_hz", "expected"), [(1.0, 4), (5.0, 16), (10.0, 23)])
def test_frames_are_encoded_at_the_vision_rate(rate_hz, expected):
    pipeline, engines = make(vision=True, vision_rate_hz=rate_hz)
    events = feed(pipeline, [QUIET] * 75, frames_every_ns=NS_PER_S // 15)  # 3 s at 15 fps
    assert len(engines.vision.stamps) == pipeline.stats.vision_encoded
    assert abs(len(engines.vision.stamps) - expected) <= 1
    scenes = of(events, SceneEvent)
    assert [s.stamp_ns for s in scenes] == engines.vision.stamps
    assert scenes[0].observations == ("face", "hand pointing top-left")
    assert scenes[0].person_present and scenes[0].description


def test_the_vision_rate_is_live_and_a_frame_older_than_the_last_is_encoded_at_once():
    pipeline, engines = make(vision=True, vision_rate_hz=1.0)
    feed(pipeline, [QUIET] * 20, frames_every_ns=NS_PER_S // 15)  # 0.8 s
    assert len(engines.vision.stamps) == 1
    pipeline.set_vision_rate(10.0)
    feed(pipeline, [QUIET] * 25, start_ns=T0 + NS_PER_S, frames_every_ns=NS_PER_S // 15)
    assert len(engines.vision.stamps) >= 9
    feed(pipeline, [QUIET] * 2, start_ns=T0 - 5 * NS_PER_S, frames_every_ns=NS_PER_S // 15)
    assert engines.vision.stamps[-1] == T0 - 5 * NS_PER_S


def test_a_bag_that_loops_has_its_frames_encoded_again():
    # The same stamps a second time (ros2 bag play --loop): the frames the first pass
    # encoded are another timeline's, and the ring of tokens was reset with the stream.
    pipeline, engines = make(vision=True, vision_rate_hz=5.0)
    feed(pipeline, [QUIET] * 50, frames_every_ns=NS_PER_S // 10)  # 2 s at 10 fps
    first = len(engines.vision.stamps)
    feed(pipeline, [QUIET] * 50, frames_every_ns=NS_PER_S // 10)  # the bag again
    assert first >= 9
    assert engines.vision.stamps[first:] == engines.vision.stamps[:first]


def _yield_run(yield_ms: int, hold_final: bool) -> tuple[FusionPipeline, list[int], int]:
    """1 s quiet, 1 s speech, 2 s quiet at 15 fps and 15 Hz vision; the final held back for
    the first second after the speech ends when ``hold_final``. Returns the pipeline, the
    stamps encoded and the end of speech."""
    pipeline, engines = make(
        ScriptedVad(confirm=1, hang=5),
        vision=True,
        vision_rate_hz=15.0,
        turn_yield_ns=yield_ms * NS_PER_MS,
    )
    every = NS_PER_S // 15
    engines.recognizer.hold = hold_final
    events = feed(pipeline, [QUIET] * 25 + [LOUD] * 25 + [QUIET] * 25, frames_every_ns=every)
    engines.recognizer.hold = False
    feed(pipeline, [QUIET] * 25, start_ns=T0 + 75 * CHUNK_NS, frames_every_ns=every)
    (end,) = activity(events, Activity.END)
    return pipeline, engines.vision.stamps, end.stamp_ns


@pytest.mark.parametrize("yield_ms", [0, 300, 600])
def test_frames_wait_while_the_turn_ends_and_the_onset_frame_does_not(yield_ms):
    pipeline, stamps, end_ns = _yield_run(yield_ms, hold_final=False)
    onset_ns = T0 + 25 * CHUNK_NS
    final_ns = end_ns + 5 * CHUNK_NS  # the VAD reports the end after 5 quiet chunks: the final
    resume_ns = final_ns + yield_ms * NS_PER_MS
    waited = [s for s in stamps if final_ns <= s < resume_ns - 2 * CHUNK_NS]  # a chunk late
    assert waited == []
    assert any(abs(s - onset_ns) < NS_PER_S // 15 for s in stamps)  # the onset's frame
    assert pipeline.stats.vision_yielded == pytest.approx(yield_ms / 1000 * 15, abs=2)
    after = [s for s in stamps if s >= resume_ns]
    assert after and after[0] - resume_ns <= 2 * NS_PER_S // 15


def test_frames_wait_while_the_recogniser_decodes_at_a_pause():
    """Before the VAD's closing silence ends the speech, the recogniser's decode at the
    pause (the final's, unless the user goes on) has the cores."""
    pipeline, engines = make(
        ScriptedVad(confirm=1, hang=10),
        vision=True,
        vision_rate_hz=15.0,
        turn_yield_ns=600 * NS_PER_MS,
    )
    every = NS_PER_S // 15
    feed(pipeline, [QUIET] * 25 + [LOUD] * 25, frames_every_ns=every)
    engines.recognizer.pausing = True
    before = len(engines.vision.stamps)
    feed(pipeline, [QUIET] * 5, start_ns=T0 + 50 * CHUNK_NS, frames_every_ns=every)
    assert len(engines.vision.stamps) == before  # the pause: nothing encoded
    assert pipeline.stats.vision_yielded >= 2
    engines.recognizer.pausing = False  # the user went on
    feed(pipeline, [LOUD] * 5, start_ns=T0 + 55 * CHUNK_NS, frames_every_ns=every)
    assert len(engines.vision.stamps) > before


def test_frames_wait_for_a_late_final_and_the_yield_after_it():
    pipeline, stamps, end_ns = _yield_run(200, hold_final=True)
    final_ns = T0 + 75 * CHUNK_NS  # the final came out then, 1 s after the speech ended
    resume_ns = final_ns + 200 * NS_PER_MS
    assert [s for s in stamps if end_ns + 5 * CHUNK_NS <= s < resume_ns - 2 * CHUNK_NS] == []
    assert any(resume_ns <= s < resume_ns + 2 * NS_PER_S // 15 for s in stamps)
    assert pipeline.stats.vision_yielded >= 15


def test_frames_wait_no_longer_than_the_cap_after_the_speech():
    pipeline, stamps, end_ns = _yield_run(1500, hold_final=True)  # final 1 s after the speech
    every = NS_PER_S // 15
    feed(pipeline, [QUIET] * 50, start_ns=T0 + 100 * CHUNK_NS, frames_every_ns=every)
    cap_ns = end_ns + MAX_TURN_YIELD_NS  # before the final's 1.5 s yield is over
    assert [s for s in stamps if end_ns + 5 * CHUNK_NS <= s < cap_ns - 2 * CHUNK_NS] == []
    assert any(cap_ns <= s < cap_ns + 2 * every for s in stamps)


def test_a_speech_start_is_associated_with_the_frames_in_its_window():
    pipeline, engines = make(ScriptedVad(confirm=2), vision=True, vision_rate_hz=30.0)
    events = feed(
        pipeline, [QUIET] * 25 + [LOUD] * 10 + [QUIET] * 15, frames_every_ns=NS_PER_S // 25
    )  # a frame on every chunk
    (start,) = activity(events, Activity.START)
    (decision,) = of(events, Decision)
    t = start.stamp_ns
    assert decision.trigger.stamp_ns == t and decision.trigger.modality == Modality.AUDIO
    assert decision.decided_ns >= t + 120 * NS_PER_MS
    encoded = [s for s in engines.vision.stamps if t - 80 * NS_PER_MS <= s <= t + 120 * NS_PER_MS]
    assert [c.stamp_ns for c in decision.candidates] == encoded
    assert all(c.modality == Modality.VISION for c in decision.candidates)
    assert sum(c.chosen for c in decision.candidates) == 1
    assert all(c.chosen or c.reason for c in decision.candidates)
    assert pipeline.stats.associations == 1


@pytest.mark.parametrize("lag_ms", [200, 400])
def test_a_speech_start_waits_for_the_frames_of_its_window_from_a_camera_behind(lag_ms):
    """Each frame arrives ``lag_ms`` after the audio of its moment (a busy machine): the
    decision waits for the window's frames instead of deciding on the audio's clock alone."""
    pipeline, engines = make(ScriptedVad(confirm=2), vision=True, vision_rate_hz=30.0)
    lag = lag_ms * NS_PER_MS
    events = []
    for i, level in enumerate([QUIET] * 25 + [LOUD] * 10 + [QUIET] * 20):
        stamp = T0 + i * CHUNK_NS
        frame = (stamp - lag, np.zeros((4, 4, 3), np.uint8)) if stamp - lag >= T0 else None
        events += pipeline.step(stamp + CHUNK_NS, audio=[(stamp, chunk(level, i))], frame=frame)
    (start,) = activity(events, Activity.START)
    (decision,) = of(events, Decision)
    t = start.stamp_ns
    encoded = [s for s in engines.vision.stamps if t - 80 * NS_PER_MS <= s <= t + 120 * NS_PER_MS]
    assert len(encoded) >= 4
    assert [c.stamp_ns for c in decision.candidates] == encoded


def test_a_camera_further_behind_than_the_lag_cap_does_not_hold_the_decision():
    pipeline, _ = make(ScriptedVad(confirm=2), vision=True, vision_rate_hz=30.0)
    lag = MAX_FRAME_LAG_NS + 200 * NS_PER_MS
    events = []
    for i, level in enumerate([QUIET] * 25 + [LOUD] * 10 + [QUIET] * 30):
        stamp = T0 + i * CHUNK_NS
        frame = (stamp - lag, np.zeros((4, 4, 3), np.uint8)) if stamp - lag >= T0 else None
        events += pipeline.step(stamp + CHUNK_NS, audio=[(stamp, chunk(level, i))], frame=frame)
    (decision,) = of(events, Decision)
    assert decision.candidates == ()  # decided on the audio's clock: its frames came too late


def test_speech_is_reported_ongoing_once_per_slice_while_it_lasts():
    pipeline, _ = make(ScriptedVad(confirm=2, hang=3))
    events = feed(pipeline, [QUIET] * 3 + [LOUD] * 10 + [QUIET] * 5)
    kinds = [e.kind for e in speech_activity(events)]
    assert kinds[0] == Activity.START and kinds[-1] == Activity.END
    assert kinds.count(Activity.ONGOING) >= 8
    ongoing = activity(events, Activity.ONGOING)
    assert all(0 < e.speech_s <= 0.6 for e in ongoing)
    assert pipeline.stats.voice_activity == len(of(events, VoiceActivityEvent))


def test_silence_says_how_far_the_stream_is_heard_often_in_a_pause_and_seldom_after():
    pipeline, _ = make(ScriptedVad(confirm=2, hang=3))
    events = feed(pipeline, [QUIET] * 5 + [LOUD] * 6 + [QUIET] * 100)
    voice = of(events, VoiceActivityEvent)
    kinds = [e.kind for e in voice]
    start, end = kinds.index(Activity.START), kinds.index(Activity.END)
    # Before the speech is confirmed and after its END, never while it lasts.
    assert Activity.SILENCE not in kinds[start:end]
    assert Activity.SILENCE in kinds[:start]
    silences = [e for e in voice[end:] if e.kind == Activity.SILENCE]
    assert all(e.utterance_id == 0 and e.speech_s == 0 for e in silences)
    # The first at once after the END (the pause heard so far), then every 100 ms (three
    # 40 ms chunks) for 2 s after the speech, every 500 ms (13 chunks) after that.
    last_speech_ns = max(e.stamp_ns for e in voice[:end] if e.kind == Activity.ONGOING)
    assert silences[0].stamp_ns - last_speech_ns <= CHUNK_NS
    speech_end_ns = voice[end].stamp_ns
    gaps = [
        (b.stamp_ns - speech_end_ns, b.stamp_ns - a.stamp_ns)
        for a, b in itertools.pairwise(silences)
    ]
    assert {gap for after, gap in gaps if after <= SILENCE_PAUSE_NS} == {3 * CHUNK_NS}
    assert {gap for after, gap in gaps if after > SILENCE_PAUSE_NS + SILENCE_IDLE_EVERY_NS} == {
        13 * CHUNK_NS
    }
    # No new audio, no new SILENCE: a stalled microphone does not look like a heard pause.
    assert activity(pipeline.step(T0 + 200 * CHUNK_NS), Activity.SILENCE) == []
    # A stream that starts again (a bag looping) is said at once.
    events = feed(pipeline, [QUIET] * 3, start_ns=T0 - 10 * NS_PER_S)
    assert activity(events, Activity.SILENCE)[0].stamp_ns <= T0 - 10 * NS_PER_S + 2 * CHUNK_NS


class Buffers:
    """An input source whose audio grows while the pipeline reads it (a callback meanwhile)."""

    def __init__(self, audio: list, late: list, frames: list) -> None:
        self.audio, self.late, self.frames = audio, late, frames
        self.frames_taken = 0

    def take_audio(self) -> list:
        audio, self.audio = self.audio, self.late
        self.late = []
        return audio

    def take_played(self) -> list:
        return []

    def take_frame(self):
        self.frames_taken += 1
        frame = self.frames[-1] if self.frames else None
        self.frames = []
        return frame


def test_a_source_is_pulled_again_for_audio_that_arrives_during_the_pass():
    engines = FusionEngines(ScriptedVad(), ScriptedRecognizer(), ScriptedVision())
    frames = [
        (T0, np.zeros((4, 4, 3), np.uint8)),
        (T0 + 20 * NS_PER_MS, np.zeros((4, 4, 3), np.uint8)),
    ]
    source = Buffers([(T0, chunk(QUIET))], [(T0 + CHUNK_NS, chunk(QUIET))], frames)
    pipeline = FusionPipeline(config(), engines, source=source, clock=lambda: 0)
    pipeline.step(T0)  # anchors the slices: no slice ran
    assert pipeline.ring.stats.inserted == 2 and source.frames_taken == 0
    pipeline.step(T0 + 2 * CHUNK_NS)  # a slice: the newest frame, at its ingest stage
    assert source.frames_taken == 1
    assert engines.vision.stamps == [T0 + 20 * NS_PER_MS]


# ----------------------------------------------------------------------------- by meaning
@dataclass(frozen=True)
class Labelled:
    code: int
    observations: tuple
    labels: tuple
    pointed: str | None = None

    @property
    def summary(self) -> tuple:
        return tuple((label, None) for label in self.labels)


class LabelledVision:
    """Frames whose first pixel is 1 show a cat, the others a cup on a table."""

    def __init__(self) -> None:
        self.stamps: list[int] = []

    def encode(self, rgb: np.ndarray, stamp_ns: int) -> Labelled:
        self.stamps.append(stamp_ns)
        labels = ("cat",) if rgb[0, 0, 0] == 1 else ("cup", "dining table")
        return Labelled(0, (), labels)


class SayingRecognizer(ScriptedRecognizer):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def end(self) -> None:
        super().end()
        self.ended[-1] = Final(self.text)


@pytest.fixture(scope="module")
def words():
    from omniflow.engines.embedding import load_word_space

    return load_word_space()  # the shipped label vectors; no embedder needed for these words


def feed_scene(pipeline: FusionPipeline, levels: list[int], cat_until: int, every: int) -> list:
    """One chunk per level from T0; a frame every ``every`` chunks, a cat before chunk
    ``cat_until``, then a cup."""
    events = []
    for i, level in enumerate(levels):
        stamp = T0 + i * CHUNK_NS
        frame = None
        if i % every == 0:
            rgb = np.zeros((48, 64, 3), np.uint8)
            rgb[0, 0, 0] = 1 if i < cat_until else 0
            frame = (stamp, rgb)
        events += pipeline.step(stamp + CHUNK_NS, audio=[(stamp, chunk(level, i))], frame=frame)
    return events


def test_the_frame_nearest_the_onset_is_encoded_though_the_vision_rate_is_low(words):
    engines = FusionEngines(ScriptedVad(confirm=3), SayingRecognizer("hello"), LabelledVision())
    engines.words = words
    pipeline = FusionPipeline(config(vision_rate_hz=0.5), engines, clock=lambda: 0)
    events = feed_scene(pipeline, [QUIET] * 30 + [LOUD] * 15 + [QUIET] * 10, 1000, every=2)
    onset = T0 + 30 * CHUNK_NS
    assert onset in engines.vision.stamps  # at 0.5 Hz only T0 and T0 + 2 s would be
    by_time, by_words = of(events, Decision)
    assert by_time.chosen[0].stamp_ns == onset and by_time.utterance_id == 1
    assert by_words.query == "" and by_words.chosen[0].stamp_ns == onset  # no object named


def test_the_onset_frame_is_paired_though_a_backlog_of_audio_came_with_the_onset(words):
    """A busy machine hands the pipeline 800 ms of audio at once, the speech onset inside it:
    the frame nearest the onset is encoded after all of that audio, and still joins both of
    the utterance's decisions (it was dropped as late, behind the newest audio token)."""
    engines = FusionEngines(ScriptedVad(confirm=3), SayingRecognizer("hello"), LabelledVision())
    engines.words = words
    pipeline = FusionPipeline(config(vision_rate_hz=0.5), engines, clock=lambda: 0)
    events, waiting = [], []
    for i, level in enumerate([QUIET] * 30 + [LOUD] * 15 + [QUIET] * 15):
        stamp = T0 + i * CHUNK_NS
        waiting.append((stamp, chunk(level, i)))
        if 28 <= i < 47:  # held up: handed over with chunk 47
            audio = []
        else:
            audio, waiting = waiting, []
        frame = (stamp, np.zeros((48, 64, 3), np.uint8)) if i % 2 == 0 else None
        events += pipeline.step(stamp + CHUNK_NS, audio=audio, frame=frame)
    onset = T0 + 30 * CHUNK_NS
    assert pipeline.ring.stats.late_drops == 0
    by_time, by_words = of(events, Decision)
    assert by_time.chosen[0].stamp_ns == onset
    assert by_words.chosen[0].stamp_ns == onset


def test_the_onset_frame_of_a_camera_behind_is_the_one_of_the_onset_not_the_newest_then(words):
    """Frames come 280 ms after the audio of their moment and the vision rate is low: the
    frame encoded for the onset is the one taken at the onset, which comes after the START."""
    engines = FusionEngines(ScriptedVad(confirm=3), SayingRecognizer("hello"), LabelledVision())
    engines.words = words
    pipeline = FusionPipeline(config(vision_rate_hz=0.5), engines, clock=lambda: 0)
    lag = 7 * CHUNK_NS
    events = []
    for i, level in enumerate([QUIET] * 30 + [LOUD] * 15 + [QUIET] * 15):
        stamp = T0 + i * CHUNK_NS
        frame = (stamp - lag, np.zeros((48, 64, 3), np.uint8)) if stamp - lag >= T0 else None
        events += pipeline.step(stamp + CHUNK_NS, audio=[(stamp, chunk(level, i))], frame=frame)
    onset = T0 + 30 * CHUNK_NS
    assert onset in engines.vision.stamps
    by_time, by_words = of(events, Decision)
    assert by_time.chosen[0].stamp_ns == onset
    assert by_words.chosen[0].stamp_ns == onset


def test_an_onset_waiting_for_a_camera_behind_is_forgotten_when_the_stream_loops(words):
    """The stream goes back before the onset's frame came: the new pass's frame at that
    stamp is not encoded for an onset of the old pass."""
    engines = FusionEngines(ScriptedVad(confirm=3), SayingRecognizer("hello"), LabelledVision())
    engines.words = words
    pipeline = FusionPipeline(config(vision_rate_hz=0.5), engines, clock=lambda: 0)
    lag = 7 * CHUNK_NS
    levels = [QUIET] * 30 + [LOUD] * 4 + [QUIET] * 40  # the loop comes after chunk 33
    for i, level in enumerate(levels):
        stamp = T0 + (i if i < 34 else i - 34) * CHUNK_NS
        frame = (stamp - lag, np.zeros((48, 64, 3), np.uint8)) if stamp - lag >= T0 else None
        pipeline.step(stamp + CHUNK_NS, audio=[(stamp, chunk(level, i))], frame=frame)
    # the first frame, at the vision rate; not the new pass's frame at the old onset (1.2 s)
    assert engines.vision.stamps == [T0]


def test_without_the_onset_ring_a_low_vision_rate_leaves_the_window_empty(words):
    engines = FusionEngines(ScriptedVad(confirm=3), SayingRecognizer("hello"), LabelledVision())
    pipeline = FusionPipeline(config(vision_rate_hz=0.5, onset_ring_ns=0), engines, clock=lambda: 0)
    events = feed_scene(pipeline, [QUIET] * 30 + [LOUD] * 15 + [QUIET] * 10, 1000, every=2)
    (decision,) = of(events, Decision)
    assert decision.candidates == ()


def test_the_final_asks_again_by_its_words_and_is_handed_out_after_that_decision(words):
    engines = FusionEngines(
        ScriptedVad(confirm=3), SayingRecognizer("What colour is the cat?"), LabelledVision()
    )
    engines.words = words
    pipeline = FusionPipeline(config(), engines, clock=lambda: 0)
    # a cat until 1.0 s, then the cup; the question at 1.4 s
    events = feed_scene(pipeline, [QUIET] * 35 + [LOUD] * 20 + [QUIET] * 10, 25, every=2)
    ordered = [e for e in events if isinstance(e, Decision) or getattr(e, "final", False)]
    assert [type(e).__name__ for e in ordered] == ["Decision", "Decision", "TranscriptEvent"]
    by_time, by_words, final = ordered
    assert by_time.chosen[0].labels == ("cup", "dining table")
    assert (by_words.query, by_words.utterance_id, final.utterance_id) == ("cat", 1, 1)
    (chosen,) = by_words.chosen
    assert chosen.labels == ("cat",) and chosen.bloom_hit and chosen.hamming == 0
    assert chosen.stamp_ns == T0 + 24 * CHUNK_NS  # the last cat frame: the nearest of them
    assert by_words.window_before_ns == pipeline.config.look_back_ns


def test_a_final_ready_between_slices_goes_out_then_after_its_decision(words):
    recognizer = SayingRecognizer("What colour is the cat?")
    engines = FusionEngines(ScriptedVad(confirm=3), recognizer, LabelledVision(), words=words)
    pipeline = FusionPipeline(config(), engines, clock=lambda: 0)
    recognizer.hold = True  # the final's decode is still running when the speech ends
    events = feed_scene(pipeline, [QUIET] * 35 + [LOUD] * 20 + [QUIET] * 10, 25, every=2)
    assert not [e for e in of(events, TranscriptEvent) if e.final]
    recognizer.hold = False
    next_slice_ns = pipeline.scheduler.next_due_ns
    out = pipeline.step(next_slice_ns - CHUNK_NS // 2)  # mid-slice: no slice runs now
    assert pipeline.scheduler.next_due_ns == next_slice_ns
    ordered = [e for e in out if isinstance(e, Decision) or getattr(e, "final", False)]
    assert [type(e).__name__ for e in ordered] == ["Decision", "TranscriptEvent"]
    by_words, final = ordered
    assert (by_words.query, by_words.utterance_id, final.text) == ("cat", 1, recognizer.text)
    assert pipeline.stats.associations == 2  # by time at the onset, then by the words


def test_unused_frames_shrink_to_a_quarter_at_the_vision_rate_and_save_memory(words):
    def held(freshness_limit: int) -> tuple[list, int]:
        engines = FusionEngines(ScriptedVad(), None, LabelledVision(), words=words)
        pipeline = FusionPipeline(config(unused_limit=freshness_limit), engines, clock=lambda: 0)
        feed_scene(pipeline, [QUIET] * 75, 1000, every=5)  # 3 s, 5 frames/s, no speech
        tokens = list(pipeline.ring.query(0, 2**62, Modality.VISION))
        return tokens, sum(t.payload.nbytes for t in tokens)

    tokens, fresh_bytes = held(3)
    assert len(tokens) == 15
    shapes = [t.payload.image.shape for t in tokens]
    assert shapes[-3:] == [(48, 64, 3)] * 3  # the newest three: full resolution
    assert shapes[:-3] == [(24, 32, 3)] * 12  # left out of three rounds or more: a quarter
    assert all(t.resolution.name == "QUARTER" for t in tokens[:-3])
    _, stale_bytes = held(100)  # freshness that never fires in 3 s
    assert fresh_bytes * 15 == stale_bytes * (3 + 12 / 4)  # 40 % of the frames' bytes


def primed(bias: SceneBias | None, cat_until: int, quiet: int = 30, **overrides) -> list:
    """The prompts of one utterance at chunk ``quiet``: (prompt, chunks fed before it)."""
    engines = FusionEngines(ScriptedVad(confirm=3), SayingRecognizer("hi"), LabelledVision())
    pipeline = FusionPipeline(config(bias=bias, **overrides), engines, clock=lambda: 0)
    feed_scene(pipeline, [QUIET] * quiet + [LOUD] * 15 + [QUIET] * 10, cat_until, every=2)
    (utterance,) = engines.recognizer.utterances
    assert pipeline.stats.primed_utterances == int(bool(utterance["prompts"]))
    assert pipeline.stats.last_bias == (utterance["prompts"] or [("", 0)])[-1][0]
    return utterance["prompts"]


def test_the_recogniser_is_primed_with_the_labels_in_view_before_it_hears_a_word():
    assert primed(SceneBias(), cat_until=0) == [("cup, dining table", 0)]


def test_the_frame_nearest_the_onset_primes_it_again_newest_first():
    # A cat until the onset, then a cup; at 0.5 frames/s only T0's frame (the cat) is
    # encoded before the START, the onset's (the cup) just after it.
    bias = SceneBias(look_back_ns=2 * NS_PER_S)
    prompts = primed(bias, cat_until=30, vision_rate_hz=0.5)
    assert prompts == [("cat", 0), ("cup, dining table, cat", 3)]


def test_frames_before_the_look_back_and_skipped_labels_do_not_prime_it():
    bias = SceneBias(look_back_ns=200 * NS_PER_MS, skip=("cup", "dining table"))
    # cats until 0.4 s, cups (skipped) from then on; speech at 1.2 s
    assert primed(bias, cat_until=10) == []


def test_names_prime_it_with_nothing_in_view_and_no_bias_never_primes():
    assert primed(SceneBias(names=("Ada",), skip=("cup", "dining table")), 0) == [("Ada", 0)]
    assert primed(None, cat_until=0) == []


def test_closing_the_engines_stops_those_that_run_threads_of_their_own():
    closed = []

    class ClosingRecognizer(ScriptedRecognizer):
        def close(self) -> None:
            closed.append("recognizer")

    engines = FusionEngines(ScriptedVad(), ClosingRecognizer(), ScriptedVision())
    engines.close()  # the VAD and the vision fake have no close(): nothing to stop
    assert closed == ["recognizer"]
