"""A KV event subscriber written the way the engine's consumers read the stream: vLLM's array-layout msgspec
structs (its earlier releases' subscribers, and Dynamo's relay) and llm-d's positional decoder (its Go structs:
a BlockStored is [tag, hashes, parent, token_ids as uint32, block_size, lora_id, medium, lora_name], a
BlockRemoved [tag, hashes, medium]; a parent of 0 means none; hashes read as 64-bit integers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import msgpack
import msgspec
import zmq

END_OF_REPLAY = -1


# ---- vLLM's array layout (msgspec, strict types) --------------------------------------------------------------

class VllmEvent(msgspec.Struct, array_like=True, omit_defaults=True, tag=True):
    pass


class VllmBlockStored(VllmEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]


class VllmBlockRemoved(VllmEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: Optional[str]


class VllmAllBlocksCleared(VllmEvent, tag="AllBlocksCleared"):
    pass


class VllmBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[Union[VllmBlockStored, VllmBlockRemoved, VllmAllBlocksCleared]]
    data_parallel_rank: Optional[int] = None


def decode_vllm(payload: bytes) -> VllmBatch:
    return msgspec.msgpack.decode(payload, type=VllmBatch)


# ---- llm-d's positional reading -----------------------------------------------------------------------------

def _u64(value) -> int:
    assert isinstance(value, int) and 0 <= value < 2**64, f"a hash llm-d cannot read as uint64: {value!r}"
    return value


def decode_llmd(payload: bytes) -> list[tuple]:
    """(tag, hashes, parent or 0, tokens, block_size, medium) per event, checked as llm-d's structs type them."""
    batch = msgpack.unpackb(payload, raw=False)
    assert isinstance(batch, list) and len(batch) >= 2 and isinstance(batch[0], float), "not an array batch"
    out = []
    for event in batch[1]:
        assert isinstance(event, list) and isinstance(event[0], str), f"not a tagged array: {event!r}"
        tag = event[0]
        if tag == "BlockStored":
            assert 5 <= len(event) <= 8, event
            hashes = [_u64(h) for h in event[1]]
            parent = 0 if event[2] is None else _u64(event[2])
            tokens = event[3]
            assert all(isinstance(t, int) and 0 <= t < 2**32 for t in tokens)
            assert isinstance(event[4], int)
            medium = event[6] if len(event) > 6 else None
            out.append((tag, hashes, parent, tokens, event[4], medium))
        elif tag == "BlockRemoved":
            assert 2 <= len(event) <= 3, event
            out.append((tag, [_u64(h) for h in event[1]], 0, [], 0, event[2] if len(event) > 2 else None))
        else:
            assert tag == "AllBlocksCleared", tag
            out.append((tag, [], 0, [], 0, None))
    return out


# ---- the sockets --------------------------------------------------------------------------------------------

@dataclass
class Listener:
    """A SUB socket on the engine's endpoint, subscribed to topics starting with `topic`; `received` holds
    (sequence, payload) in arrival order, `topics` the topics they came under."""

    endpoint: str
    topic: bytes = b""
    received: list[tuple[int, bytes]] = field(default_factory=list)
    topics: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.context = zmq.Context()
        self.sub = self.context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, self.topic)
        self.sub.setsockopt(zmq.RCVTIMEO, 200)
        self.sub.connect(self.endpoint)

    def drain(self, quiet_s: float = 0.5) -> list[tuple[int, bytes]]:
        """Read until nothing arrives for `quiet_s`."""
        import time

        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            try:
                topic, seq, payload = self.sub.recv_multipart()
            except zmq.Again:
                continue
            assert topic.startswith(self.topic)
            self.topics.add(topic)
            self.received.append((int.from_bytes(seq, "big"), payload))
            last = time.monotonic()
        return self.received

    def close(self) -> None:
        """Idempotent: a test may close it before its fixture does."""
        if not self.sub.closed:
            self.sub.close(0)
            self.context.term()


def replay(endpoint: str, start: int, timeout_ms: int = 5000) -> list[tuple[int, bytes]]:
    """Ask the replay socket for every batch from `start` on."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
    socket.connect(endpoint)
    try:
        socket.send_multipart((b"", start.to_bytes(8, "big")))
        got = []
        while True:
            _, seq, payload = socket.recv_multipart()
            number = int.from_bytes(seq, "big", signed=True)
            if number == END_OF_REPLAY:
                return got
            got.append((number, payload))
    finally:
        socket.close(0)
        context.term()


def stored_blocks(payloads: list[bytes]) -> list[VllmBlockStored]:
    return [e for p in payloads for e in decode_vllm(p).events if isinstance(e, VllmBlockStored)]


def removed_hashes(payloads: list[bytes]) -> set[int]:
    return {h for p in payloads for e in decode_vllm(p).events if isinstance(e, VllmBlockRemoved)
            for h in e.block_hashes}
