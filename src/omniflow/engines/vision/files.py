"""Model files named by a manifest under ``models/``: where the set-up put them, and whether
they are the files the manifest names.

A manifest (TOML, e.g. ``models/coco_detector.toml``) lists each file's role, name, size and
sha256 and where it comes from. ``make setup`` (``scripts/fetch_models.py``) installs the
files into ``<prefix>/share/omniflow/models/<manifest name>/`` beside the manifest itself;
:func:`model_files` finds them there (or in a folder the user names) and :func:`verify`
checks them, so a missing or damaged file is an :class:`~omniflow.errors.EngineError` that
names the manifest and the command that fixes it. Nothing is downloaded here. No ROS imports.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from omniflow.errors import EngineError
from omniflow.resources import share_dir

__all__ = [
    "FETCH_COMMAND",
    "Manifest",
    "ManifestFile",
    "file_sha256",
    "installed_manifest",
    "model_files",
    "read_manifest",
    "verify",
]

#: What a user runs to (re)install the files of every manifest.
FETCH_COMMAND = "make setup (or: python3 scripts/fetch_models.py --dest <share/omniflow/models>)"


@dataclass(frozen=True)
class ManifestFile:
    role: str
    name: str
    member: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """One manifest: its path, name (the install folder), licence, source and files."""

    path: Path
    name: str
    licence: str
    source: dict[str, str]
    files: tuple[ManifestFile, ...]

    def file(self, role: str) -> ManifestFile:
        """The file with this role (``cpu``, ``edgetpu``, ``labels``)."""
        for f in self.files:
            if f.role == role:
                return f
        raise EngineError(f"manifest {self.path} names no {role!r} file")


def read_manifest(path: str | Path) -> Manifest:
    """Parse a manifest; EngineError naming the file when it is missing or malformed."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        files = tuple(
            ManifestFile(f["role"], f["name"], f["member"], int(f["size"]), f["sha256"].lower())
            for f in data["files"]
        )
        return Manifest(path, data["name"], data["licence"], dict(data["source"]), files)
    except FileNotFoundError as err:
        raise EngineError(f"model manifest {path} is missing; reinstall the package") from err
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as err:
        raise EngineError(f"model manifest {path} is unreadable: {err}") from err


def installed_manifest(file_name: str) -> Manifest:
    """The installed copy of ``models/<file_name>`` (``share/omniflow/models``)."""
    try:
        folder = share_dir() / "models"
    except FileNotFoundError as err:
        raise EngineError(str(err)) from err
    return read_manifest(folder / file_name)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(manifest: Manifest, folder: Path) -> list[str]:
    """What is wrong with the manifest's files in ``folder`` (empty: all present and equal
    to the manifest's size and sha256)."""
    problems = []
    for f in manifest.files:
        path = folder / f.name
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif path.stat().st_size != f.size:
            problems.append(f"{path} has {path.stat().st_size} bytes, expected {f.size}")
        elif file_sha256(path) != f.sha256:
            problems.append(f"{path} has the wrong sha256 (damaged or another version)")
    return problems


def model_files(manifest: Manifest, folder: str | Path = "") -> dict[str, Path]:
    """The manifest's files by role. Without ``folder``: the set-up's install folder beside
    the manifest, checked against the manifest (EngineError naming the manifest, what is
    wrong and :data:`FETCH_COMMAND`). With ``folder`` (the user's own copies, e.g. Coral's
    published files): only their presence is checked."""
    if folder:
        where = Path(folder).expanduser()
        missing = [str(where / f.name) for f in manifest.files if not (where / f.name).is_file()]
        if missing:
            raise EngineError(
                f"model files missing: {', '.join(missing)} (the names {manifest.path} "
                "lists; or leave the model folder empty for the installed ones)"
            )
    else:
        where = manifest.path.parent / manifest.name
        problems = verify(manifest, where)
        if problems:
            raise EngineError(
                f"the files of {manifest.path} are not installed correctly: "
                f"{'; '.join(problems)}. Install them with: {FETCH_COMMAND}"
            )
    return {f.role: where / f.name for f in manifest.files}
