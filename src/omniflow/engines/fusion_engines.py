"""The engines of the fusion pipeline, made from settings: VAD, recogniser, vision, echo,
noise suppression.

:func:`fusion_engines_from_params` reads the fusion node's parameters (dotted names);
:func:`make_fusion_engines` takes the choices one by one (benchmarks). Both raise
ConfigError or EngineError when an engine cannot be made. No ROS imports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from omniflow.core.asr_model import BASE_MIN_CPUS, BASE_MIN_MEMORY_MB, WHISPER_MODELS
from omniflow.core.denoise import DENOISERS
from omniflow.core.echo import EchoGate, EchoReference
from omniflow.core.fusion_pipeline import EchoStage, FusionEngines
from omniflow.core.lexicon import WordSpace
from omniflow.core.params import ParamSpec, defaults
from omniflow.core.timing import SAMPLE_RATE
from omniflow.engines.asr import ASR_ENGINES, Recognizer, make_recognizer
from omniflow.engines.denoise import make_denoiser
from omniflow.engines.embedding import TextEmbedder, load_word_space
from omniflow.engines.vad import VAD_ENGINES, make_vad
from omniflow.engines.vision import (
    ACCELERATORS,
    DEFAULT_DETECTORS,
    VisionEncoder,
    make_default_encoder,
)
from omniflow.engines.whisper_models import whisper_model_choice, whisper_model_dir

__all__ = ["EchoSettings", "fusion_engines_from_params", "make_fusion_engines", "word_space"]

# Played audio kept as the echo reference beyond the longest delay and reverberation.
REFERENCE_SLACK_MS = 1000


# The fusion node's parameters that choose and tune its engines (fusion_engines_from_params).
def _threads_spec(engine: str, name: str) -> ParamSpec:
    return ParamSpec(
        f"asr.{engine}.threads",
        2,
        f"CPU threads of each {name} decode",
        minimum=1,
        maximum=16,
        read_only=True,
    )


def _partial_interval_spec(engine: str) -> ParamSpec:
    return ParamSpec(
        f"asr.{engine}.partial_interval_ms",
        500,
        "New speech between two partial decodes (a pause decodes at once)",
        unit="ms",
        minimum=0,
        maximum=5000,
        read_only=True,
    )


ENGINE_PARAMS = (
    ParamSpec(
        "audio.denoise",
        "none",
        "Noise suppressor on the microphone (after the echo removal, before the VAD and the "
        "recogniser): none, speex (Speex's preprocessor, 20 ms delay, 0.08 ms a 40 ms chunk) "
        "or rnnoise (RNNoise, ~31 ms delay, 12 ms a chunk). Off by default: on the hearing "
        "benchmark Speex lowered Whisper's word error rate at 10 dB SNR (0.54 -> 0.34) but "
        "raised it at 20 dB (0.26 -> 0.32) and in far rooms; RNNoise raised it everywhere "
        "(benchmarks/hearing.py --denoise). speex suits a steadily loud room",
        choices=DENOISERS,
        read_only=True,
    ),
    ParamSpec(
        "vad.engine", "webrtc", "Voice-activity detector", choices=VAD_ENGINES, read_only=True
    ),
    ParamSpec(
        "vad.min_speech_ms",
        60,
        "Speech at least this long starts an utterance "
        "(shorter blips are ignored); part of the barge-in latency (90 ms adds about "
        "40 ms: benchmarks/barge_in.py)",
        unit="ms",
        minimum=30,
        maximum=1000,
        read_only=True,
    ),
    ParamSpec(
        "vad.min_silence_ms",
        200,
        "A pause at least this long ends an utterance (shorter ones stay inside it) and "
        "sends its final transcript; the dialogue node waits longer after words that "
        "sound unfinished (end_of_turn.*), so a pause inside a sentence does not end the turn",
        unit="ms",
        minimum=100,
        maximum=3000,
        read_only=True,
    ),
    ParamSpec(
        "vad.noise.margin_db",
        6.0,
        "How far above the room's noise floor (tracked over vad.noise.history_s) a window "
        "must be: speech starts only with such a window and ends when none comes, so steady "
        "noise (a fan, pink noise) never passes for speech without end; 0 turns the floor "
        "gate off (benchmarks/vad_noise.py)",
        unit="dB",
        minimum=0.0,
        maximum=30.0,
        read_only=True,
    ),
    ParamSpec(
        "vad.noise.history_s",
        1.5,
        "The noise floor is the lowest smoothed level of this much audio: the longest a new "
        "steady noise can pass for speech (longer than a stretch of speech without a pause)",
        unit="s",
        minimum=0.3,
        maximum=10.0,
        read_only=True,
    ),
    ParamSpec(
        "asr.engine",
        "whisper",
        "Speech recogniser: whisper (open vocabulary, faster-whisper; the model is "
        "asr.whisper.model), moonshine (open vocabulary, Moonshine base: its decodes read "
        "only the speech, so its final transcript comes about 0.5 s sooner, but it drops or "
        "mishears more short phrases: docs/hardware.md) or pocketsphinx (exact and cheap with "
        "a JSGF grammar)",
        choices=ASR_ENGINES,
        read_only=True,
    ),
    ParamSpec(
        "asr.grammar_path",
        "",
        "JSGF grammar for command sets (pocketsphinx only); empty: open vocabulary",
        read_only=True,
    ),
    ParamSpec(
        "asr.whisper.model",
        "tiny.en",
        "Whisper model: tiny.en; base (better in steady fan noise, worse in babble, decodes "
        f"take 2.2x as long: docs/hardware.md); auto (base on a PC with >= {BASE_MIN_CPUS} CPUs "
        f"and {BASE_MIN_MEMORY_MB / 1024:g} GB, tiny.en on a Raspberry Pi class board or a "
        "smaller PC)",
        choices=WHISPER_MODELS,
        read_only=True,
    ),
    ParamSpec(
        "asr.whisper.model_path",
        "",
        "CTranslate2 Whisper model directory, used instead of asr.whisper.model when set",
        read_only=True,
    ),
    _threads_spec("whisper", "Whisper"),
    ParamSpec(
        "asr.whisper.beam_size",
        5,
        "Whisper beam search width (1: greedy)",
        minimum=1,
        maximum=10,
        read_only=True,
    ),
    ParamSpec(
        "asr.whisper.no_repeat_ngram_size",
        3,
        "Whisper never writes the same run of this many tokens twice in one transcript, so "
        "it does not loop on a phrase of the background talkers; a phrase the user says "
        "twice keeps its words, written with other punctuation or one word changed (0: no "
        "limit; 3 lowered babble's word error rate at 10 dB, 8 kHz most, and raised no "
        "room's pooled figure; 2 and 4 helped less: benchmarks/hearing.py --no-repeat)",
        minimum=0,
        maximum=10,
        read_only=True,
    ),
    ParamSpec(
        "asr.whisper.background_db",
        9.0,
        "A final transcript's word this much quieter than its loudest word, and guessed at "
        "(probability below asr.whisper.background_unsure), is taken for a background "
        "voice's and left out: in babble Whisper writes down the other talkers before and "
        "after the user's sentence (benchmarks/hearing.py --background); 0: every word kept",
        unit="dB",
        minimum=0.0,
        maximum=60.0,
        read_only=True,
    ),
    ParamSpec(
        "asr.whisper.background_unsure",
        0.7,
        "A quiet word (asr.whisper.background_db) is left out only when Whisper's "
        "probability for it is below this",
        minimum=0.0,
        maximum=1.0,
        read_only=True,
    ),
    ParamSpec(
        "asr.whisper.room_after_ms",
        300,
        "The decode started at a pause (most often the final's) is cut 40 ms after the last "
        "voiced chunk; it hears up to this much of the room's sound from before the speech "
        "(the lead-in, asr.lead_in_ms) after it, no word taken from there: in "
        "benchmarks/hearing.py's rooms, 384 sentences at 20 and 10 dB, word error rate "
        "0.443 against 0.462 without (benchmarks/README.md); 0: none",
        unit="ms",
        minimum=0,
        maximum=1000,
        read_only=True,
    ),
    _partial_interval_spec("whisper"),
    ParamSpec(
        "asr.whisper.draft_window_s",
        10.0,
        "Seconds of Whisper's 30 s window a partial transcript's encoder reads (greedy, "
        "no word times), never less than the speech and 1 s, the rest of the window read "
        "from the padding's encoding; finals read asr.whisper.final_window_s",
        unit="s",
        minimum=1.0,
        maximum=30.0,
        read_only=True,
    ),
    ParamSpec(
        "asr.whisper.final_window_s",
        30.0,
        "Seconds of Whisper's 30 s window a full decode's encoder reads (the decode that "
        "becomes the final transcript), never less than the speech and 1 s, the rest read "
        "from the padding's encoding: 10 took half the time of 30 (end of speech -> "
        "speaker 0.68x in the graph: benchmarks/session_replay.py --baseline final-window) "
        "and heard more words wrong at 16 kHz (benchmarks/hearing.py --final-window "
        "30,10); a band-limited source's finals read "
        "asr.whisper.band_limited_final_window_s",
        unit="s",
        minimum=1.0,
        maximum=30.0,
        read_only=True,
    ),
    ParamSpec(
        "asr.whisper.band_limited_final_window_s",
        10.0,
        "asr.whisper.final_window_s for audio from a band-limited source (a microphone "
        "below 16 kHz, resampled): in 8 kHz rooms 10 heard as many words or more than 30 "
        "(10 dB: 0.50 against 0.55 word error rate), in half the time (benchmarks/hearing.py)",
        unit="s",
        minimum=1.0,
        maximum=30.0,
        read_only=True,
    ),
    ParamSpec(
        "asr.moonshine.model_path",
        "",
        "Moonshine model directory (encoder_model and decoder_model_merged as .onnx or .ort, "
        "tokenizer.bin); empty: the base-en model of moonshine-cpp",
        read_only=True,
    ),
    _threads_spec("moonshine", "Moonshine"),
    _partial_interval_spec("moonshine"),
    ParamSpec("vision.enabled", True, "Encode camera frames into vision tokens", read_only=True),
    ParamSpec(
        "vision.accelerator",
        "auto",
        "Where the object detector runs: auto (the Edge TPU through pycoral, else through "
        "the libedgetpu delegate, else the CPU, with the reason logged and in diagnostics), "
        "edgetpu (refuse to start without one) or cpu",
        choices=ACCELERATORS,
        read_only=True,
    ),
    ParamSpec(
        "vision.detectors",
        ",".join(DEFAULT_DETECTORS),
        "MediaPipe detectors run beside the objects, comma-separated: hand (the pointing "
        "palm), face, person (pose); people already come from the objects",
        read_only=True,
    ),
    ParamSpec(
        "vision.model_dir",
        "",
        "Folder with the COCO detector's files under the names models/coco_detector.toml "
        "lists (e.g. Coral's published ones); empty: those make setup installed (checked)",
        read_only=True,
    ),
    ParamSpec(
        "vision.threads",
        2,
        "CPU threads of each vision model (the objects and palm detectors on the CPU)",
        minimum=1,
        maximum=8,
        read_only=True,
    ),
    ParamSpec(
        "vision.objects.threshold",
        0.4,
        "Lowest score of an object that is reported (COCO detector)",
        minimum=0.05,
        maximum=0.95,
        read_only=True,
    ),
    ParamSpec(
        "vision.edgetpu.retry_s",
        30.0,
        "After the Edge TPU failed mid-run (objects then run on the CPU), try it again this often",
        unit="s",
        minimum=1.0,
        maximum=3600.0,
        read_only=True,
    ),
    ParamSpec(
        "echo.enabled",
        True,
        "Take the robot's own voice (the speech node's "
        "played_audio) out of the microphone before voice activity and recognition",
        read_only=True,
    ),
    ParamSpec(
        "echo.suppress_score",
        0.7,
        "A chunk whose energy the played audio explains "
        "at least this much is the robot's voice: it starts no speech (lower: fewer "
        "false barge-ins, more missed double talk)",
        minimum=0.3,
        maximum=1.0,
        read_only=True,
    ),
    ParamSpec(
        "echo.max_delay_ms",
        300,
        "Longest delay searched between a played block's "
        "stamp and its echo in the microphone (output buffering and distance)",
        unit="ms",
        minimum=0,
        maximum=1000,
        read_only=True,
    ),
    ParamSpec(
        "echo.reverb_ms",
        320,
        "How long the room keeps the robot's voice audible after it was played",
        unit="ms",
        minimum=0,
        maximum=1000,
        read_only=True,
    ),
    ParamSpec(
        "echo.linear",
        True,
        "Also learn the echo path as a linear filter while the robot talks alone; once it "
        "cancels 20 dB, the recogniser hears its residual where the user talks over the "
        "robot instead of the noise the gate puts there (the bundled session's barge-in "
        "'Stop' is heard instead of 'up'; benchmarks/echo.py --hear --spoken-before). The "
        "voice detector is unchanged; with audio.denoise set, both hear the suppressor's "
        "output instead. About 0.2 ms a chunk while the robot speaks",
        read_only=True,
    ),
)


@dataclass(frozen=True)
class EchoSettings:
    """The echo stage's settings (``echo.*`` parameters of the fusion node)."""

    suppress_score: float = 0.7
    max_delay_ms: float = 300.0
    reverb_ms: float = 320.0
    linear: bool = True


def make_fusion_engines(
    *,
    vad_engine: str,
    min_speech_ms: float,
    min_silence_ms: float,
    noise_margin_db: float | None = None,
    noise_history_s: float | None = None,
    recognizer: Callable[[], Recognizer] | None = None,
    vision: Callable[[], VisionEncoder] | None = None,
    echo: EchoSettings | None = None,
    words: Callable[[], WordSpace] | None = None,
    denoise: str = "none",
) -> FusionEngines:
    """The engines: a ``vad_engine`` VAD with these timings and noise-floor gate (None: the
    ``vad.noise.*`` parameters' defaults), the recogniser, vision encoder and word space the
    factories make (none without one), an echo stage with ``echo`` and the ``denoise``
    noise suppressor."""
    default = defaults(ENGINE_PARAMS)
    timing = {
        "min_speech_ms": float(min_speech_ms),
        "min_silence_ms": float(min_silence_ms),
        "noise_margin_db": float(
            default["vad.noise.margin_db"] if noise_margin_db is None else noise_margin_db
        ),
        "noise_history_s": float(
            default["vad.noise.history_s"] if noise_history_s is None else noise_history_s
        ),
    }
    suppressor = make_denoiser(denoise)  # first: a bad choice fails before models load
    vad = make_vad(vad_engine, **timing)
    asr = recognizer() if recognizer is not None else None
    encoder = vision() if vision is not None else None
    stage = None
    if echo is not None:
        reference = EchoReference(
            echo.max_delay_ms + echo.reverb_ms + REFERENCE_SLACK_MS, SAMPLE_RATE
        )
        gate = EchoGate(
            reference,
            suppress_score=echo.suppress_score,
            max_delay_ms=echo.max_delay_ms,
            reverb_ms=echo.reverb_ms,
            linear=echo.linear,
        )
        stage = EchoStage(gate, reference, make_vad(vad_engine, **timing))
    return FusionEngines(
        vad, asr, encoder, stage, words() if words is not None else None, suppressor
    )


def word_space() -> WordSpace:
    """The shipped label vectors and the text embedding for other words heard."""
    return load_word_space(TextEmbedder())


def fusion_engines_from_params(
    params: Mapping[str, object], vision_factory: Callable[[], VisionEncoder] | None = None
) -> FusionEngines:
    """The engines the fusion node's parameters describe; ``vision_factory`` replaces the
    default vision encoder (tests)."""
    p = params

    def recognizer() -> Recognizer:
        model_path = None
        if p["asr.engine"] == "whisper":
            model_path, _ = whisper_model_dir(p["asr.whisper.model"], p["asr.whisper.model_path"])
        return make_recognizer(
            p["asr.engine"],
            grammar_path=p["asr.grammar_path"] or None,
            whisper_model_path=model_path,
            whisper_threads=p["asr.whisper.threads"],
            whisper_beam_size=p["asr.whisper.beam_size"],
            whisper_no_repeat_ngram_size=p["asr.whisper.no_repeat_ngram_size"],
            whisper_background_db=p["asr.whisper.background_db"],
            whisper_background_unsure=p["asr.whisper.background_unsure"],
            whisper_room_after_ms=p["asr.whisper.room_after_ms"],
            whisper_partial_interval_ms=p["asr.whisper.partial_interval_ms"],
            whisper_draft_window_s=p["asr.whisper.draft_window_s"],
            whisper_final_window_s=p["asr.whisper.final_window_s"],
            whisper_band_limited_final_window_s=p["asr.whisper.band_limited_final_window_s"],
            moonshine_model_path=p["asr.moonshine.model_path"] or None,
            moonshine_threads=p["asr.moonshine.threads"],
            moonshine_partial_interval_ms=p["asr.moonshine.partial_interval_ms"],
        )

    def vision() -> VisionEncoder:
        kinds = [k.strip() for k in str(p["vision.detectors"]).split(",") if k.strip()]
        return make_default_encoder(
            kinds,
            num_threads=p["vision.threads"],
            accelerator=p["vision.accelerator"],
            model_dir=p["vision.model_dir"],
            object_threshold=p["vision.objects.threshold"],
            retry_s=p["vision.edgetpu.retry_s"],
        )

    echo = (
        EchoSettings(
            p["echo.suppress_score"],
            p["echo.max_delay_ms"],
            p["echo.reverb_ms"],
            p["echo.linear"],
        )
        if p["echo.enabled"]
        else None
    )
    return make_fusion_engines(
        vad_engine=p["vad.engine"],
        min_speech_ms=p["vad.min_speech_ms"],
        min_silence_ms=p["vad.min_silence_ms"],
        noise_margin_db=p["vad.noise.margin_db"],
        noise_history_s=p["vad.noise.history_s"],
        recognizer=recognizer,
        vision=(vision_factory or vision) if p["vision.enabled"] else None,
        echo=echo,
        words=word_space if p["vision.enabled"] else None,
        denoise=p["audio.denoise"],
    )


def describe_engines(engines: FusionEngines, p: Mapping[str, object]) -> str:
    """One line on what was configured: the VAD, the recogniser, vision (and where its
    objects run), the slice and echo removal."""
    report = getattr(engines.vision, "diagnostics", dict)()
    where = f", objects on {report['backend']}: {report['backend_reason']}" if report else ""
    if p["asr.engine"] == "whisper":
        choice = whisper_model_choice(p["asr.whisper.model"], p["asr.whisper.model_path"])
        heard = f"whisper {choice.model} ({choice.reason})"
    elif p["asr.engine"] == "moonshine":
        heard = f"moonshine {p['asr.moonshine.model_path'] or 'base-en (moonshine-cpp)'}"
    else:
        heard = f"{p['asr.engine']} ({p['asr.grammar_path'] or 'open vocabulary'})"
    return (
        f"vad {p['vad.engine']}, {heard}, vision "
        f"{'on' if engines.vision else 'off'} ({p['vision.rate_hz']:g} frames/s{where}), "
        f"slice {p['scheduler.slice_ms']} ms, echo removal "
        f"{'on' if engines.echo else 'off'}, noise suppression {p['audio.denoise']}"
    )
