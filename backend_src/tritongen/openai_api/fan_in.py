"""Several generator streams (n > 1, or several prompts) merged into one.

Why: OpenAI's `n` and prompt lists are independent generations that must run
in parallel (the generator batches them), yet reach the client as one
response or one SSE stream. Leaving the merged stream early cancels every
generator stream still running, so a disconnect frees them all.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import AsyncGenerator, AsyncIterator

from .generator_client import Piece

_DONE = object()


async def fan_in(streams: list[AsyncGenerator[Piece, None]]) -> AsyncIterator[tuple[int, Piece]]:
    """Yield (stream index, piece) as pieces arrive; the first error is raised and ends them all."""
    if len(streams) == 1:  # the common case needs no tasks
        async with aclosing(streams[0]) as only:
            async for piece in only:
                yield 0, piece
        return

    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream: AsyncGenerator[Piece, None]) -> None:
        try:
            async with aclosing(stream) as s:
                async for piece in s:
                    await queue.put((index, piece))
            await queue.put((index, _DONE))
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
            await queue.put((index, exc))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
