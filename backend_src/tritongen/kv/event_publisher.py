"""vLLM's ZMQ KV event publisher protocol: a PUB socket sending [topic, sequence, payload] and a ROUTER
socket that replays buffered batches to a subscriber that missed some.

A subscriber that (re)connects asks the replay socket for everything from a sequence number on, by sending
that number as 8 big-endian bytes; it gets [sequence, payload] for each buffered batch from there, then
[-1, b""]. Sockets live on a thread of their own (ZMQ sockets are not thread-safe), so the engine thread
only queues a step's events and never waits on the network.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque

import zmq

from .kv_events import AllBlocksCleared, KvEvent, KvEventsConfig, encode_batch

END_OF_REPLAY = (-1).to_bytes(8, "big", signed=True)
_POLL_MS = 20


class ZmqEventPublisher:
    def __init__(self, config: KvEventsConfig, max_queued_batches: int = 100_000):
        config.validate()
        self.config = config
        self.topic = config.topic.encode()
        self.dropped_batches = 0  # the queue was full: a router misses these until it replays
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued_batches)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._next_seq = 0
        self._bound = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tritongen-kv-events", daemon=True)
        self._thread.start()
        self._bound.wait(10)
        if self._error is not None:
            raise ValueError(f"KV events: cannot bind {config.endpoint} / {config.replay_endpoint or '-'}: "
                             f"{self._error}") from None
        # A fresh engine holds no block: a router that knew an earlier process on this endpoint forgets it.
        self.publish([AllBlocksCleared()])

    def publish(self, events: list[KvEvent]) -> None:
        """Queue one step's events as one batch; never blocks."""
        if not events:
            return
        try:
            self._queue.put_nowait((time.time(), list(events)))
        except queue.Full:
            self.dropped_batches += 1

    def close(self) -> None:
        """Send what is queued, then an AllBlocksCleared (this engine's blocks are gone), then stop."""
        if self._thread.is_alive():
            self.publish([AllBlocksCleared()])
            self._queue.put(None)
            self._thread.join(timeout=10)

    # ---- the publisher thread ------------------------------------------------

    def _run(self) -> None:
        context = zmq.Context()
        pub = replay = None
        try:
            pub = context.socket(zmq.PUB)
            pub.setsockopt(zmq.LINGER, 1000)
            pub.bind(self.config.endpoint)
            if self.config.replay_endpoint:
                replay = context.socket(zmq.ROUTER)
                replay.setsockopt(zmq.LINGER, 0)
                replay.bind(self.config.replay_endpoint)
        except zmq.ZMQError as exc:
            self._error = exc
            for socket in (pub, replay):
                if socket is not None:
                    socket.close(0)
            context.term()
            return
        finally:
            self._bound.set()
        try:
            self._serve(pub, replay)
        finally:
            pub.close()
            if replay is not None:
                replay.close()
            context.term()

    def _serve(self, pub: zmq.Socket, replay: zmq.Socket | None) -> None:
        poller = zmq.Poller()
        if replay is not None:
            poller.register(replay, zmq.POLLIN)
        while True:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    return
                self._send(pub, *item)
            if replay is None:
                try:
                    item = self._queue.get(timeout=_POLL_MS / 1000)
                except queue.Empty:
                    continue
                if item is None:
                    return
                self._send(pub, *item)
            elif poller.poll(_POLL_MS):
                self._answer_replay(replay)

    def _send(self, pub: zmq.Socket, ts: float, events: list[KvEvent]) -> None:
        seq, payload = self._next_seq, encode_batch(ts, events)
        self._next_seq += 1
        pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload))
        self._buffer.append((seq, payload))

    def _answer_replay(self, replay: zmq.Socket) -> None:
        frames = replay.recv_multipart()
        if len(frames) != 3 or len(frames[2]) != 8:
            return  # not a replay request: ignored, the socket keeps serving others
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self._buffer):
            if seq >= first:
                replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
        replay.send_multipart((client, b"", END_OF_REPLAY, b""))
