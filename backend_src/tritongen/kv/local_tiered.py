"""LocalTiered connector: a CPU tier (LRU, bounded) and an optional disk tier that survives restarts.

Stores run on a background thread so the engine never waits on them.
With a disk tier, every stored chunk is also written to disk (write-through),
so a restart finds all of them. Eviction drops the lowest store priority
first, least recently used within it; pinned chunks stay.

Both tiers hold chunks in the page dtype (chunk_bytes.py). A disk file is
the magic line, a JSON header, the header's SHA-256 and the payload, whose
dtype, SHA-256 and size the header holds. At start-up each header is
checked (checksum, every field's type and range, the key it hashes to
against the file name) and a bad file is deleted, as are files of the
previous format (no dtype: their magic line differs), files in another
dtype, the files an earlier build of the same model left (keys carry a
digest of the model's files) and temporary files of processes that are
gone; a payload is checked
on fetch, and a bad one is deleted and reported missing, so the engine
recomputes. Files are readable by their owner only, and each writer
process uses temporary names of its own, so two servers may share a path.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .chunk_bytes import chunk_nbytes, decode_chunk, encode_chunk
from .codec import KV_DTYPES, KvCodec, codec
from .connector import (
    NOT_FOUND,
    CachePriority,
    ConnectorCapabilities,
    FetchedKv,
    KvCacheConnector,
    KvCacheKey,
    KvCacheLocation,
    KvStoreEntry,
)
from .connector_config import COMPRESSIONS, LocalTieredConfig
from .counters import Counters
from .kv_events import BlockRemoved, BlockStored
from .store_writer import StoreWriter

MAGIC = b"TRITONGEN-KV-3\n"
_MAX_HEADER_BYTES = 4096
_HEADER_FIELDS = {"model_id": str, "layer_range": list, "chunk_hash": str, "chunk_index": int, "num_tokens": int,
                  "shape": list, "dtype": str, "compression": str, "priority": str, "payload_bytes": int,
                  "sha256": str}


class CorruptChunk(ValueError):
    """A disk file that is not a chunk this connector wrote: it is deleted, never served."""


def _header_lines(header: dict) -> bytes:
    text = json.dumps(header, sort_keys=True).encode()
    return text + b"\n" + hashlib.sha256(text).hexdigest().encode() + b"\n"


def _read_header(f, digest: str) -> dict:
    """The header of an open chunk file, checked whole; CorruptChunk on any fault."""
    if f.read(len(MAGIC)) != MAGIC:
        raise CorruptChunk("bad magic")
    text = f.readline(_MAX_HEADER_BYTES).rstrip(b"\n")
    if f.readline(80).rstrip(b"\n") != hashlib.sha256(text).hexdigest().encode():
        raise CorruptChunk("header checksum mismatch")
    try:
        header = json.loads(text)
    except ValueError:
        raise CorruptChunk("header is not JSON") from None
    if not isinstance(header, dict) or any(not isinstance(header.get(k), t) for k, t in _HEADER_FIELDS.items()):
        raise CorruptChunk("header fields missing or of the wrong type")
    shape, layers = header["shape"], header["layer_range"]
    if len(shape) != 5 or any(not isinstance(n, int) or n <= 0 for n in shape) or shape[1] != 2 \
            or len(layers) != 2 or any(not isinstance(n, int) for n in layers) or shape[0] != layers[1] - layers[0] \
            or header["num_tokens"] != shape[3] or header["chunk_index"] < 0 or len(header["sha256"]) != 64 \
            or header["dtype"] not in KV_DTYPES or header["compression"] not in COMPRESSIONS \
            or header["priority"] not in CachePriority.__members__:
        raise CorruptChunk("header values out of range")
    size = chunk_nbytes(codec(header["dtype"]), shape)
    if not 0 < header["payload_bytes"] <= size + 1024 \
            or (header["compression"] == "none" and header["payload_bytes"] != size):
        raise CorruptChunk("payload size out of range")
    key = KvCacheKey(header["model_id"], tuple(layers), header["chunk_hash"], header["chunk_index"],
                     header["num_tokens"])
    if key.digest != digest:
        raise CorruptChunk("header does not match the file name")
    return header


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class _Entry:
    size: int
    priority: CachePriority
    header: dict
    payload: bytes | None = None  # CPU tier only
    path: Path | None = None  # disk tier only
    pinned: bool = False
    blocks: BlockStored | None = None  # its pages, as announced (when the engine publishes KV events)

    @property
    def file(self) -> Path:
        """The file of a disk-tier entry (every one has it)."""
        assert self.path is not None, "a CPU-tier entry has no file"
        return self.path


class _Tier:
    """Entries by digest in LRU order, with a byte budget and priority-first eviction."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.bytes = max_bytes, 0
        self.entries: OrderedDict[str, _Entry] = OrderedDict()

    def touch(self, digest: str) -> None:
        self.entries.move_to_end(digest)

    def add(self, digest: str, entry: _Entry) -> list[_Entry]:
        """Insert, then evict until within budget; returns what was evicted."""
        if digest in self.entries:
            self.remove(digest)
        self.entries[digest] = entry
        self.bytes += entry.size
        evicted = []
        while self.bytes > self.max_bytes:
            victims = [(e.priority.value, i, d) for i, (d, e) in enumerate(self.entries.items())
                       if not e.pinned and d != digest]
            if not victims:
                break
            _, _, victim = min(victims)
            gone = self.remove(victim)
            assert gone is not None  # a victim is one of the entries
            evicted.append(gone)
        return evicted

    def remove(self, digest: str) -> _Entry | None:
        entry = self.entries.pop(digest, None)
        if entry is not None:
            self.bytes -= entry.size
        return entry


class _DiskTier(_Tier):
    """The disk tier: its entries are the chunk files in `folder`."""

    def __init__(self, max_bytes: int, folder: Path):
        super().__init__(max_bytes)
        self.folder = folder


class LocalTieredConnector(KvCacheConnector):
    def __init__(self, config: LocalTieredConfig, model_id: str = "", kv_dtype: str = "f32"):
        config.validate()
        self.config = config
        self.model_id = model_id
        self.codec: KvCodec = codec(kv_dtype)
        self.cpu = _Tier(config.cpu_max_bytes)
        self.disk = _DiskTier(config.disk_max_bytes, Path(config.disk_path)) if config.disk_path else None
        self._lock = threading.Lock()
        # Bytes per second, refined from real transfers; the first guesses are conservative.
        self.bandwidth = {"cpu": 2e9, "disk": 2e8}
        self._stats = Counters("stored", "store_dropped", "bytes_stored", "corrupt_dropped", "stale_dropped")
        if self.disk is not None:
            self.disk.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._load_disk_index(self.disk)
        self._writer = StoreWriter(self._store_now, self._count_dropped, "tritongen-kv-store", max_queued=64)

    @property
    def stats(self) -> dict[str, int]:
        """The counts at one instant: the store writer adds to them while the engine thread runs."""
        return self._stats.snapshot()

    # ---- protocol ---------------------------------------------------------

    def lookup(self, key: KvCacheKey) -> KvCacheLocation:
        with self._lock:
            for name, tier in (("cpu", self.cpu), ("disk", self.disk)):
                entry = tier.entries.get(key.digest) if tier is not None else None
                if entry is not None:
                    return KvCacheLocation(name, 1000.0 * entry.size / self.bandwidth[name], entry.size)
        return NOT_FOUND

    def store(self, entry: KvStoreEntry) -> None:
        """Queue a chunk for storing; dropped (and counted) when the queue is full, never blocking."""
        if not self._writer.put(entry):
            self._count_dropped()

    def fetch(self, key: KvCacheKey) -> FetchedKv | None:
        start = time.perf_counter()
        with self._lock:
            entry = self.cpu.entries.get(key.digest)
            tier, source = "cpu", self.cpu
            if entry is None and self.disk is not None:
                entry, tier, source = self.disk.entries.get(key.digest), "disk", self.disk
            if entry is None:
                return None
            source.touch(key.digest)
        try:
            payload = self._cpu_payload(entry) if tier == "cpu" else self._read_payload(entry)
            kv = self._decode(entry.header, payload)
        except (OSError, ValueError, zlib.error) as exc:  # never fatal: the engine recomputes this chunk
            self._drop(key.digest, source, exc)
            return None
        elapsed = time.perf_counter() - start
        with self._lock:
            if elapsed > 0:  # running estimate of this tier's throughput
                self.bandwidth[tier] = 0.7 * self.bandwidth[tier] + 0.3 * (entry.size / elapsed)
            if tier == "disk":  # promote: the next fetch of this chunk is a CPU hit
                promoted = _Entry(entry.size, entry.priority, entry.header, payload, blocks=entry.blocks)
                self._announce("cpu", entry.blocks, self.cpu.add(key.digest, promoted))
        return FetchedKv(key, kv, tier, elapsed)

    def prefetch(self, key: KvCacheKey) -> None:
        """Bring a disk chunk into the CPU tier now, so the fetch that follows is a memory read."""
        with self._lock:
            on_disk_only = (key.digest not in self.cpu.entries and self.disk is not None
                            and key.digest in self.disk.entries)
        if on_disk_only:
            self.fetch(key)  # a disk fetch promotes; a corrupt file is dropped as on any fetch

    def pin(self, key: KvCacheKey) -> None:
        self._set_pinned(key, True)

    def unpin(self, key: KvCacheKey) -> None:
        self._set_pinned(key, False)

    def evict(self, key: KvCacheKey) -> None:
        with self._lock:
            self._announce("cpu", None, [e for e in (self.cpu.remove(key.digest),) if e is not None])
            if self.disk is not None:
                entry = self.disk.remove(key.digest)
                if entry is not None:
                    entry.file.unlink(missing_ok=True)
                    self._announce("disk", None, [entry])

    def health(self) -> bool:
        return self._writer.alive and (self.disk is None or os.access(self.disk.folder, os.W_OK))

    def capabilities(self) -> ConnectorCapabilities:
        return ConnectorCapabilities(prefetch=self.disk is not None, pinnable=True, compression=list(COMPRESSIONS))

    def flush(self) -> None:
        """Wait until queued stores are written (tests, shutdown)."""
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    # ---- storing ----------------------------------------------------------

    def _count_dropped(self) -> None:
        self._stats.add(store_dropped=1)

    def _store_now(self, entry: KvStoreEntry) -> None:
        raw = encode_chunk(self.codec, entry.kv)
        payload = zlib.compress(raw, 1) if self.config.compression == "zlib" else raw
        key = entry.key
        header = {"model_id": key.model_id, "layer_range": list(key.layer_range), "chunk_hash": key.chunk_hash,
                  "chunk_index": key.chunk_index, "num_tokens": key.num_tokens, "shape": list(entry.kv.shape),
                  "dtype": self.codec.name, "compression": self.config.compression, "priority": entry.priority.name,
                  "payload_bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
        with self._lock:  # CPU evictions need no write-back: with a disk tier, every chunk is written there too
            self._announce("cpu", entry.blocks, self.cpu.add(key.digest, _Entry(len(payload), entry.priority,
                                                                                 header, payload, blocks=entry.blocks)))
        if self.disk is not None:
            path = self.disk.folder / f"{key.digest}.kv"
            # Named after this process (and unique in it): two servers on one path never write the same file.
            tmp = path.with_name(f"{key.digest}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(MAGIC + _header_lines(header) + payload)
            os.replace(tmp, path)  # a crash never leaves a half-written chunk under its real name
            with self._lock:
                evicted = self.disk.add(key.digest, _Entry(len(payload), entry.priority, header, path=path,
                                                           blocks=entry.blocks))
                for old in evicted:
                    old.file.unlink(missing_ok=True)
                self._announce("disk", entry.blocks, evicted)
        self._stats.add(stored=1, bytes_stored=len(payload))

    # ---- disk -------------------------------------------------------------

    def _load_disk_index(self, disk: _DiskTier) -> None:
        """Rebuild the disk tier from its files after a restart; delete what must not be served or kept.

        Deleted: temporary files of processes that are gone, files whose header is bad, files an earlier
        build of this model wrote (same name, other weights digest), and what the byte budget evicts.
        Payloads are checked on fetch.
        """
        folder = disk.folder
        for tmp in folder.glob("*.tmp"):
            parts = tmp.name.split(".")
            if len(parts) != 4 or not parts[1].isdigit() or not _pid_alive(int(parts[1])):
                tmp.unlink(missing_ok=True)
        name, _, weights = self.model_id.rpartition("@")
        files = sorted(folder.glob("*.kv"), key=lambda p: p.stat().st_mtime)
        for path in files:
            try:
                with open(path, "rb") as f:
                    header = _read_header(f, path.stem)
            except (OSError, CorruptChunk):
                path.unlink(missing_ok=True)
                self._stats.add(corrupt_dropped=1)
                continue
            file_name, _, file_weights = header["model_id"].rpartition("@")
            if (name and file_name == name and file_weights != weights) or header["dtype"] != self.codec.name:
                path.unlink(missing_ok=True)
                self._stats.add(stale_dropped=1)
                continue
            entry = _Entry(header["payload_bytes"], CachePriority[header["priority"]], header, path=path)
            for old in disk.add(path.stem, entry):
                old.file.unlink(missing_ok=True)

    @staticmethod
    def _cpu_payload(entry: _Entry) -> bytes:
        assert entry.payload is not None  # the CPU tier keeps every payload in memory
        return entry.payload

    @staticmethod
    def _read_payload(entry: _Entry) -> bytes:
        with open(entry.file, "rb") as f:
            _read_header(f, entry.file.stem)
            payload = f.read(entry.header["payload_bytes"] + 1)
        if (len(payload) != entry.header["payload_bytes"]
                or hashlib.sha256(payload).hexdigest() != entry.header["sha256"]):
            raise CorruptChunk("payload size or checksum mismatch")
        return payload

    def _announce(self, tier: str, stored: BlockStored | None, evicted: list[_Entry]) -> None:
        """A tier's pages as KV events, its name as the medium: what it just evicted, then what it now holds."""
        if self.on_event is None:
            return
        gone = [h for e in evicted if e.blocks is not None for h in e.blocks.block_hashes]
        if gone:
            self.on_event(BlockRemoved(gone, tier.upper()))
        if stored is not None:
            self.on_event(replace(stored, medium=tier.upper()))

    def _drop(self, digest: str, tier: _Tier, reason: BaseException) -> None:
        with self._lock:
            entry = tier.remove(digest)
            self._announce("cpu" if tier is self.cpu else "disk", None, [entry] if entry is not None else [])
        if entry is not None and entry.path is not None:
            entry.path.unlink(missing_ok=True)
        self._stats.add(corrupt_dropped=1)

    def _decode(self, header: dict, payload: bytes) -> np.ndarray:
        size = chunk_nbytes(self.codec, header["shape"])
        raw = zlib.decompressobj().decompress(payload, size + 1) if header["compression"] == "zlib" else payload
        if len(raw) != size or header["dtype"] != self.codec.name:  # bounded decompression: stops one byte over
            raise CorruptChunk("payload does not hold the header's shape in this dtype")
        return decode_chunk(self.codec, header["shape"], raw)

    def _set_pinned(self, key: KvCacheKey, pinned: bool) -> None:
        with self._lock:
            for tier in (self.cpu, self.disk):
                entry = tier.entries.get(key.digest) if tier is not None else None
                if entry is not None:
                    entry.pinned = pinned
