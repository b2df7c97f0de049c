"""rosbag2 files (MCAP, and sqlite3 for reading) with the ``rosbags`` library: no rclpy here.

``rosbag2_py`` and ``ros2 bag`` are not on PyPI; ``rosbags`` reads and writes the same format,
and its CDR serialisation is byte-identical with rclpy's, so the recorder writes the raw bytes
of its subscriptions and the player publishes raw bytes back, without a decode in between.
omniflow's own message types are registered from the ``.msg`` files installed with the package.

What a bag may be:

- a rosbag2 directory (``metadata.yaml`` and its storage files), as ``ros2 bag record`` and
  :class:`BagWriter` write it;
- a single ``.mcap`` file (``ros2 bag play`` takes those too);
- a directory whose recording was killed before ``metadata.yaml`` was written, or an MCAP file
  cut short (no index, no footer, a record cut in the middle): :class:`BagReader` then reads
  every complete record it can and says, in :attr:`BagReader.problems`, what is missing.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import shutil
import struct
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from io import BytesIO
from pathlib import Path

from omniflow.core.timing import NS_PER_S
from omniflow.errors import BagError, BagFullError

# MCAP record opcodes (https://mcap.dev/spec) read by the salvaging scanner.
_MCAP_MAGIC = b"\x89MCAP0\r\n"
_OP_SCHEMA, _OP_CHANNEL, _OP_MESSAGE, _OP_CHUNK = 0x03, 0x04, 0x05, 0x06
# Chunks are closed (compressed and written to the file) at about this many bytes.
CHUNK_BYTES = 1 << 20


@lru_cache(maxsize=1)
def typestore():
    """The ROS 2 Jazzy types plus omniflow's, from the installed ``share/omniflow/msg``."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    from omniflow.resources import share_dir

    store = get_typestore(Stores.ROS2_JAZZY)
    types = {}
    for path in sorted((share_dir() / "msg").glob("*.msg")):
        types.update(
            get_types_from_msg(path.read_text(encoding="utf-8"), f"omniflow/msg/{path.stem}")
        )
    store.register(types)
    return store


def known_type(msgtype: str) -> bool:
    """Whether ``msgtype`` (``pkg/msg/Name``) can be decoded here."""
    return msgtype in typestore().fielddefs


def message_class(msgtype: str) -> type:
    """The rclpy message class of ``pkg/msg/Name``; BagError when it cannot be imported."""
    try:
        package, kind, name = msgtype.split("/")
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ValueError, ImportError, AttributeError) as err:
        raise BagError(
            f"message type {msgtype!r} is not installed here (no Python module "
            f"for it); install its package or leave its topic out"
        ) from err


def decode(raw: bytes, msgtype: str) -> object:
    """A message decoded from its CDR bytes (a rosbags dataclass with the ROS field names)."""
    from rosbags.serde import SerdeError

    if not known_type(msgtype):
        raise BagError(f"unknown message type {msgtype!r}: omniflow cannot decode it")
    try:
        return typestore().deserialize_cdr(raw, msgtype)
    except (SerdeError, ValueError, IndexError) as err:
        raise BagError(f"a {msgtype} message cannot be decoded: {err}") from err


def encode(msg: object, msgtype: str) -> bytes:
    """CDR bytes of a rosbags message object (what rclpy would send)."""
    return bytes(typestore().serialize_cdr(msg, msgtype))


@dataclass(frozen=True)
class BagTopic:
    """One topic of a bag: its type and how many messages of it were read or indexed."""

    name: str
    msgtype: str
    count: int


@dataclass
class BagMessage:
    """One recorded message: topic, type, receive time (ns, the recorder's clock), CDR bytes."""

    topic: str
    msgtype: str
    timestamp_ns: int
    raw: bytes


@dataclass
class _Salvaged:
    topics: dict[str, BagTopic] = field(default_factory=dict)
    messages: list[BagMessage] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class BagReader:
    """Reads a bag (see the module docstring for what a bag may be), in time order.

    Raises BagError when the path does not exist or nothing in it can be read. A truncated
    bag is read up to its last complete record; :attr:`problems` then says what was lost.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.problems: list[str] = []
        self._salvaged: _Salvaged | None = None
        self._files: list[Path] = []
        if not self.path.exists():
            raise BagError(f"bag {self.path} does not exist")
        if self.path.is_dir() and (self.path / "metadata.yaml").is_file():
            self._open_directory()
        else:
            files = [self.path] if self.path.is_file() else sorted(self.path.glob("*.mcap"))
            if not files:
                raise BagError(
                    f"{self.path} is neither an MCAP file nor a rosbag2 directory "
                    "(no metadata.yaml, no .mcap files)"
                )
            if self.path.is_dir():
                self.problems.append(
                    f"{self.path} has no metadata.yaml (the recording did not "
                    "finish); read from its .mcap files"
                )
            self._files = files
            self._open_files()

    # ----------------------------------------------------------------- opening
    def _open_directory(self) -> None:
        from rosbags.rosbag2 import Reader
        from rosbags.rosbag2.errors import ReaderError

        try:
            with Reader(self.path) as reader:
                self._topics = {
                    c.topic: BagTopic(c.topic, c.msgtype, c.msgcount) for c in reader.connections
                }
        except ReaderError as err:
            self._files = sorted(self.path.glob("*.mcap"))
            if not self._files:
                raise BagError(f"cannot read bag {self.path}: {err}") from err
            self.problems.append(
                f"{self.path}/metadata.yaml unusable ({err}); read from its .mcap files"
            )
            self._open_files()

    def _open_files(self) -> None:
        from rosbags.rosbag2.errors import ReaderError
        from rosbags.rosbag2.storage_mcap import McapReader

        self._topics = {}
        for path in self._files:
            try:
                reader = McapReader(path)
                reader.open()
                connections = list(reader.connections)
                reader.close()
            except (ReaderError, TypeError, ValueError, struct.error):  # cut short
                self._salvage(path)
            else:
                for c in connections:
                    self._add_topic(c.topic, c.msgtype, c.msgcount)

    def _add_topic(self, name: str, msgtype: str, count: int) -> None:
        old = self._topics.get(name)
        self._topics[name] = BagTopic(name, msgtype, count + (old.count if old else 0))

    def _salvage(self, path: Path) -> None:
        salvaged = _salvage_mcap(path)
        if not salvaged.messages and not salvaged.topics:
            raise BagError(
                f"{path} is not a readable MCAP file: "
                f"{'; '.join(salvaged.problems) or 'no records'}"
            )
        if self._salvaged is None:
            self._salvaged = _Salvaged()
        self._salvaged.messages.extend(salvaged.messages)
        for topic in salvaged.topics.values():
            self._add_topic(topic.name, topic.msgtype, topic.count)
        self.problems.extend(salvaged.problems)

    # ----------------------------------------------------------------- contents
    @property
    def topics(self) -> dict[str, BagTopic]:
        """The bag's topics by name."""
        return dict(self._topics)

    def resolve(self, names: Iterable[str]) -> dict[str, str]:
        """The bag's topic for each graph topic name (``audio`` is found as ``audio``,
        ``/audio`` or ``/robot1/audio``): {graph name: bag name} for those found."""
        from omniflow.graph import graph_topic_name

        found = {}
        for bag_name in self._topics:
            graph_name = graph_topic_name(bag_name)
            if graph_name in names and (graph_name not in found or bag_name == graph_name):
                found[graph_name] = bag_name
        return found

    def require(self, names: Iterable[str]) -> None:
        """BagError unless every named topic is in the bag with messages, naming what is there."""
        names = list(names)
        resolved = self.resolve(names)
        missing = [
            name
            for name in names
            if name not in resolved or self._topics[resolved[name]].count == 0
        ]
        if missing:
            present = (
                ", ".join(f"{t.name} ({t.msgtype}, {t.count})" for t in self._topics.values())
                or "nothing"
            )
            raise BagError(
                f"bag {self.path} has no messages on {', '.join(missing)}; it holds: "
                f"{present}. Record those topics (omniflow record --topics ...)"
            )

    def unknown_types(self) -> dict[str, str]:
        """Topics whose type cannot be decoded or published here: {topic: type}."""
        return {t.name: t.msgtype for t in self._topics.values() if not known_type(t.msgtype)}

    def messages(self, topics: Iterable[str] | None = None) -> Iterator[BagMessage]:
        """Messages of the named topics (all by default), in time order."""
        wanted = set(self._topics if topics is None else topics)
        if self._salvaged is not None:
            yield from sorted(
                (m for m in self._salvaged.messages if m.topic in wanted),
                key=lambda m: m.timestamp_ns,
            )
            return
        if self._files:
            yield from self._file_messages(wanted)
            return
        from rosbags.rosbag2 import Reader

        with Reader(self.path) as reader:
            connections = [c for c in reader.connections if c.topic in wanted]
            for connection, timestamp, raw in reader.messages(connections=connections):
                yield BagMessage(connection.topic, connection.msgtype, timestamp, bytes(raw))

    def _file_messages(self, wanted: set[str]) -> Iterator[BagMessage]:
        import heapq

        from rosbags.rosbag2.storage_mcap import McapReader

        def one(path: Path) -> Iterator[BagMessage]:
            reader = McapReader(path)
            reader.open()
            try:
                connections = [c for c in reader.connections if c.topic in wanted]
                for connection, timestamp, raw in reader.messages(connections):
                    yield BagMessage(connection.topic, connection.msgtype, timestamp, bytes(raw))
            finally:
                reader.close()

        yield from heapq.merge(*(one(path) for path in self._files), key=lambda m: m.timestamp_ns)

    def decoded(self, topics: Iterable[str] | None = None) -> Iterator[tuple[BagMessage, object]]:
        """Messages with their decoded form; topics of unknown types are skipped."""
        unknown = self.unknown_types()
        for message in self.messages(topics):
            if message.topic not in unknown:
                yield message, decode(message.raw, message.msgtype)


_FREE_SPACE = "free some space or record onto another disk (-o)"
# Write errors that mean "no room": recording stops and the bag is closed with what it holds.
# errno -> (what happened, what to do)
_NO_ROOM = {
    errno.ENOSPC: ("no space left on the device (ENOSPC)", _FREE_SPACE),
    errno.EFBIG: (
        "the file reached the process's file-size limit (EFBIG)",
        "raise the limit (ulimit -f) or record shorter bags (--duration)",
    ),
    errno.EDQUOT: ("the disk quota is exhausted (EDQUOT)", _FREE_SPACE),
}
_MB = 1_000_000


@dataclass
class _Written:
    """The state of a bag at its last chunk safely on disk: what a failed write rolls back to."""

    size: int  # bytes of the MCAP file
    chunks: int
    counts: dict[str, int]
    writer_counts: dict[int, int]
    channel_stats: dict[int, int]
    times: tuple[int, int, int, int]  # writer first/last, storage first/last


class BagWriter:
    """Writes a rosbag2 directory with one zstd-compressed MCAP file (``ros2 bag`` reads it).

    Messages are raw CDR bytes. Chunks of about 1 MiB are compressed and written as they fill;
    :meth:`close` writes the last chunk, the index and ``metadata.yaml``. Use it as a context
    manager so an exception or Ctrl-C still closes the bag.

    When the disk fills up: with ``min_free_bytes``, a write that would leave less than that
    free on the bag's file system (``shutil.disk_usage``, checked before every message) closes
    the bag instead, while there is room for its last chunk and index. A write that fails for
    want of room anyway (ENOSPC, a ``ulimit -f`` file-size limit's EFBIG, a quota) cuts the file
    back to its last complete chunk, which frees the room the index needs, and closes it there.
    Either way the bag is complete and readable, :attr:`counts` is what it holds, and
    :class:`BagFullError` says why, where and how much was written. (The roll-back resets
    the state of rosbags' MCAP writer, pinned in requirements/constraints.txt;
    test/unit/test_bag_disk_full.py fails if a new version changes it.)
    """

    def __init__(self, path: str | Path, *, compress: bool = True, min_free_bytes: int = 0) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer
        from rosbags.rosbag2.enums import CompressionFormat, CompressionMode
        from rosbags.rosbag2.errors import WriterError

        self.path = Path(path)
        self.counts: dict[str, int] = {}
        self.received = 0
        self.failure: BagFullError | None = None
        self._min_free_bytes = min_free_bytes
        self._connections: dict[str, object] = {}
        self._writer = (
            Writer(self.path, version=Writer.VERSION_LATEST, storage_plugin=StoragePlugin.MCAP)
            if not self.path.exists()
            else None
        )
        if self._writer is None:
            raise BagError(f"{self.path} exists already; choose another output directory")
        if compress:
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        try:
            self._writer.open()
        except (WriterError, OSError) as err:
            raise BagError(f"cannot create bag {self.path}: {err}") from err
        self._open = True
        self._written = self._snapshot()

    def add_topic(self, name: str, msgtype: str) -> None:
        """Declare a topic before writing to it (BagError for a type omniflow cannot describe).
        The graph's QoS for the topic is stored as its offered profile, so ``ros2 bag play``
        replays latched state as latched and sensor streams as best effort."""
        if name in self._connections:
            return
        if not known_type(msgtype):
            raise BagError(f"cannot record {name}: message type {msgtype!r} is unknown here")
        self._connections[name] = self._writer.add_connection(
            name, msgtype, typestore=typestore(), offered_qos_profiles=[_offered_qos(name)]
        )
        self.counts[name] = 0
        self._written.counts[name] = 0
        self._written.writer_counts = dict(self._writer.counts)

    def write(self, topic: str, timestamp_ns: int, raw: bytes) -> None:
        """Append one message (raw CDR bytes) received at ``timestamp_ns``; BagFullError (the
        bag then closed) when the disk has no room for it."""
        if self.failure is not None:
            raise self.failure
        if not self._open:
            raise BagError(f"{self.path} is closed")
        self.received += 1
        storage = self._writer.storage
        if self._min_free_bytes:
            self._keep_free(storage.chunk.bio.tell() + len(raw))
        try:
            self._writer.write(self._connections[topic], int(timestamp_ns), raw)
            self.counts[topic] += 1
            if len(storage.chunks) != self._written.chunks:  # a chunk went to the file
                storage.bio.flush()
                self._written = self._snapshot()
        except OSError as err:
            self._close_after(err)

    def close(self) -> None:
        """Write what is pending, the index and metadata.yaml; safe to call twice."""
        if self._open:
            try:
                self._writer.close()
            except OSError as err:
                self._close_after(err)
            self._open = False

    @property
    def size(self) -> int:
        """Bytes of the bag's files on disk."""
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())

    def _snapshot(self) -> _Written:
        storage, writer = self._writer.storage, self._writer
        storage.bio.flush()
        return _Written(
            size=storage.bio.tell(),
            chunks=len(storage.chunks),
            counts=dict(self.counts),
            writer_counts=dict(writer.counts),
            channel_stats=dict(storage.channel_stats),
            times=(
                writer.min_timestamp,
                writer.max_timestamp,
                storage.message_start_time,
                storage.message_end_time,
            ),
        )

    def _keep_free(self, pending: int) -> None:
        free = shutil.disk_usage(self.path).free
        if free - pending >= self._min_free_bytes:
            return
        self.received -= 1  # this message is not written
        self.close()
        self.failure = BagFullError(
            f"stopped recording into {self.path}: its file system has {free / _MB:.1f} MB free, "
            f"and writing on would leave less than the {self._min_free_bytes / _MB:g} MB kept "
            "free (--min-free-mb); "
            f"the bag is closed and readable with {self._summary()}: {_FREE_SPACE}"
        )
        raise self.failure

    def _close_after(self, err: OSError) -> None:
        """Close the bag at its last complete chunk after ``err``; raise what happened."""
        from rosbags.rosbag2.storage_mcap import PendingChunk

        why, advice = _NO_ROOM.get(err.errno, (f"a write failed ({err})", _FREE_SPACE))
        storage = self._writer.storage
        self._open = False
        if storage is None:  # the MCAP file is complete; metadata.yaml was not written
            self.failure = BagFullError(
                f"{self.path}: {why} while writing metadata.yaml; the MCAP file in it is "
                f"complete ({self._summary()}) and omniflow replay reads it: {advice}"
            )
            raise self.failure from err
        written = self._written
        mcap = storage.path
        with contextlib.suppress(OSError):
            storage.bio.close()  # its buffer holds bytes that did not fit: dropped
        os.truncate(mcap, written.size)
        storage.bio = mcap.open("r+b")
        storage.bio.seek(0, os.SEEK_END)
        storage.chunk = PendingChunk(2**63 - 1, 0, BytesIO(), defaultdict(list))
        del storage.chunks[written.chunks :]
        storage.channel_stats = dict(written.channel_stats)
        (
            self._writer.min_timestamp,
            self._writer.max_timestamp,
            storage.message_start_time,
            storage.message_end_time,
        ) = written.times
        self._writer.counts = dict(written.writer_counts)
        self.counts = dict(written.counts)
        lost = self.received - sum(self.counts.values())
        try:
            self._writer.close()
            closed = f"the bag is closed and readable with {self._summary()}"
        except OSError:
            with contextlib.suppress(OSError):
                storage.bio.close()
            os.truncate(mcap, written.size)
            closed = (
                f"its index did not fit either: {mcap} holds {self._summary()} without an "
                "index, which omniflow replay still reads"
            )
        self.failure = BagFullError(
            f"{mcap}: {why} after {written.size / _MB:.1f} MB; {closed}; the {lost} messages "
            f"received after the last complete chunk are not in it: {advice}"
        )
        raise self.failure from err

    def _summary(self) -> str:
        total = sum(self.counts.values())
        per_topic = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return f"{total} messages ({per_topic or 'none'}), {self.size / _MB:.1f} MB"

    @property
    def files(self) -> list[Path]:
        return sorted(self.path.glob("*.mcap"))

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.failure is None:
            self.close()


def write_mcap_file(path: str | Path, messages: Iterable[BagMessage]) -> Path:
    """Write messages (in time order) to one self-contained ``.mcap`` file at ``path``."""
    import tempfile

    path = Path(path)
    with tempfile.TemporaryDirectory() as tmp:
        with BagWriter(Path(tmp) / "bag") as writer:
            for message in messages:
                writer.add_topic(message.topic, message.msgtype)
                writer.write(message.topic, message.timestamp_ns, message.raw)
        (produced,) = writer.files
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(produced), path)
    return path


def _offered_qos(name: str):
    """The graph's QoS of a topic (events for unknown topics) as rosbags describes QoS."""
    from rosbags.interfaces import (
        Qos,
        QosDurability,
        QosHistory,
        QosLiveliness,
        QosReliability,
        QosTime,
    )

    from omniflow.graph import EVENTS, KEPT_EVENTS, LATCHED, SENSOR_DATA, TOPICS, graph_topic_name

    kind = next((s.qos for s in TOPICS if s.name == graph_topic_name(name)), EVENTS)
    reliability, durability, depth = {
        SENSOR_DATA: (QosReliability.BEST_EFFORT, QosDurability.VOLATILE, 5),
        LATCHED: (QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL, 1),
        EVENTS: (QosReliability.RELIABLE, QosDurability.VOLATILE, 50),
        KEPT_EVENTS: (QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL, 50),
    }[kind]
    unset = QosTime(0, 0)
    return Qos(
        QosHistory.KEEP_LAST,
        depth,
        reliability,
        durability,
        unset,
        unset,
        QosLiveliness.AUTOMATIC,
        unset,
        False,
    )


# --------------------------------------------------------------------- salvaging truncated MCAP
def _string(body: bytes, offset: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<I", body, offset)
    start = offset + 4
    return body[start : start + length].decode("utf-8"), start + length


def _decompress(data: bytes, compression: str, size: int) -> bytes:
    if compression == "":
        return data
    if compression == "zstd":
        from backports import zstd

        return zstd.decompress(data)
    if compression == "lz4":
        import lz4.frame

        return lz4.frame.decompress(data)
    raise BagError(f"unsupported MCAP chunk compression {compression!r}")


def _scan_records(
    data: bytes,
    start: int,
    salvaged: _Salvaged,
    schemas: dict[int, str],
    channels: dict[int, tuple[str, str]],
    in_chunk: bool,
) -> int:
    """Read complete records from ``data[start:]``; returns where the last one ended."""
    offset = start
    while offset + 9 <= len(data):
        opcode = data[offset]
        (length,) = struct.unpack_from("<Q", data, offset + 1)
        body_start, body_end = offset + 9, offset + 9 + length
        if body_end > len(data):
            break
        body = data[body_start:body_end]
        if opcode == _OP_SCHEMA:
            (schema_id,) = struct.unpack_from("<H", body, 0)
            schemas[schema_id], _ = _string(body, 2)
        elif opcode == _OP_CHANNEL:
            channel_id, schema_id = struct.unpack_from("<HH", body, 0)
            topic, _ = _string(body, 4)
            channels[channel_id] = (topic, schemas.get(schema_id, ""))
            salvaged.topics.setdefault(topic, BagTopic(topic, schemas.get(schema_id, ""), 0))
        elif opcode == _OP_MESSAGE:
            channel_id, _sequence, log_time, _publish = struct.unpack_from("<HIQQ", body, 0)
            if channel_id in channels:
                topic, msgtype = channels[channel_id]
                salvaged.messages.append(BagMessage(topic, msgtype, log_time, body[22:]))
                old = salvaged.topics[topic]
                salvaged.topics[topic] = BagTopic(topic, old.msgtype, old.count + 1)
        elif opcode == _OP_CHUNK and not in_chunk:
            _start_t, _end_t, size, crc = struct.unpack_from("<QQQI", body, 0)
            compression, pos = _string(body, 28)
            (compressed_size,) = struct.unpack_from("<Q", body, pos)
            records = _decompress(body[pos + 8 : pos + 8 + compressed_size], compression, size)
            if crc and zlib.crc32(records) != crc:
                salvaged.problems.append(f"a chunk at byte {offset} fails its CRC; skipped")
            else:
                _scan_records(records, 0, salvaged, schemas, channels, in_chunk=True)
        offset = body_end
    return offset


def _salvage_mcap(path: Path) -> _Salvaged:
    """Every complete record of an MCAP file that may be cut short or lack its index."""
    salvaged = _Salvaged()
    data = path.read_bytes()
    if not data.startswith(_MCAP_MAGIC):
        salvaged.problems.append(f"{path} does not start with the MCAP magic bytes")
        return salvaged
    end = _scan_records(data, len(_MCAP_MAGIC), salvaged, {}, {}, in_chunk=False)
    tail = data[end:]
    if tail != _MCAP_MAGIC:
        last = max((m.timestamp_ns for m in salvaged.messages), default=0)
        salvaged.problems.append(
            f"{path.name} is truncated: it ends inside a record at byte {end} of {len(data)} "
            f"(no index or footer); read {len(salvaged.messages)} complete messages up to "
            f"t={last / NS_PER_S:.3f} s, anything after that (at most the last ~"
            f"{CHUNK_BYTES >> 20} MiB chunk) is lost"
        )
    return salvaged
