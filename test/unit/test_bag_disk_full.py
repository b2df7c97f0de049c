"""Tier 1: a bag whose disk fills up is closed and readable with what was written before, for
real: a file-size limit (EFBIG, no root needed), a small tmpfs (ENOSPC, in a user namespace
where the kernel allows one), and the free-space margin that closes the bag before that."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
from private_tmpfs import command_on_tmpfs, needs_private_tmpfs
from rclpy.serialization import deserialize_message, serialize_message

from omniflow.bag import BagReader, BagWriter
from omniflow.errors import BagFullError
from omniflow.msg import AudioChunk

START = 1_767_225_600 * 10**9
PAYLOAD = 60_000  # incompressible bytes a message: about 17 to a 1 MiB chunk
TIMEOUT_S = 120
TESTS = Path(__file__).parents[1]


def payload(sequence: int) -> bytes:
    return np.random.default_rng(sequence).integers(0, 256, PAYLOAD, dtype=np.uint8).tobytes()


def message(sequence: int) -> bytes:
    msg = AudioChunk(sample_rate=16000, sequence=sequence, data=payload(sequence))
    return serialize_message(msg)


def write_until_full(path: Path, min_free_bytes: int) -> dict:
    """Write messages until the writer stops; what it said and what it kept."""
    writer = BagWriter(path, min_free_bytes=min_free_bytes)
    writer.add_topic("audio", "omniflow/msg/AudioChunk")
    for sequence in range(10_000):
        try:
            writer.write("audio", START + sequence * 40_000_000, message(sequence))
        except BagFullError as err:
            return {"error": str(err), "counts": writer.counts, "received": writer.received}
    raise AssertionError("the writer never stopped")


def run_child(path: Path, *, min_free_bytes: int = 0, fsize: int | None = None, tmpfs_mb=0):
    """This file as a script in a child process (limits and mounts stay there)."""
    command = [sys.executable, __file__, str(path), str(min_free_bytes)]
    if tmpfs_mb:  # the tmpfs lives as long as the namespace: copy the bag out before it goes
        after = 'cp -r "$point"/bag "$point".out'
        command = command_on_tmpfs(str(path.parent), tmpfs_mb, command, after)
    limit = (
        None if fsize is None else lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize,) * 2)
    )
    # The child imports this module's imports: test/ (private_tmpfs) on its path too.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        preexec_fn=limit,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def assert_complete(path: Path, result: dict) -> None:
    reader = BagReader(path)
    assert reader.problems == []
    kept = result["counts"]["audio"]
    assert 0 < kept <= result["received"]
    assert reader.topics["audio"].count == kept
    decoded = [deserialize_message(m.raw, AudioChunk) for m in reader.messages()]
    assert [m.sequence for m in decoded] == list(range(kept))  # the first ones, in order,
    assert all(m.data.tobytes() == payload(m.sequence) for m in decoded)  # whole


def test_a_file_size_limit_closes_the_bag_at_its_last_complete_chunk(tmp_path):
    result = run_child(tmp_path / "bag", fsize=3_500_000)
    assert "EFBIG" in result["error"] and str(tmp_path / "bag") in result["error"]
    assert "closed and readable" in result["error"]
    lost = result["received"] - result["counts"]["audio"]
    assert lost > 0 and f"the {lost} messages received after" in result["error"]
    assert_complete(tmp_path / "bag", result)


@needs_private_tmpfs
def test_a_full_disk_closes_the_bag_at_its_last_complete_chunk(tmp_path):
    result = run_child(tmp_path / "disk" / "bag", tmpfs_mb=4)
    assert "ENOSPC" in result["error"] and "closed and readable" in result["error"]
    assert result["counts"]["audio"] < result["received"]  # the chunk that did not fit
    assert_complete(tmp_path / "disk.out", result)


@needs_private_tmpfs
def test_the_free_space_margin_closes_the_bag_before_the_disk_is_full(tmp_path):
    result = run_child(tmp_path / "disk" / "bag", min_free_bytes=2_000_000, tmpfs_mb=6)
    assert "would leave less than the 2 MB kept free (--min-free-mb)" in result["error"]
    assert "ENOSPC" not in result["error"]
    assert result["counts"]["audio"] == result["received"]  # stopped before any was lost
    assert_complete(tmp_path / "disk.out", result)


if __name__ == "__main__":
    print(json.dumps(write_until_full(Path(sys.argv[1]), int(sys.argv[2]))))
