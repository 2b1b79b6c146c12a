"""Cancel a non-streaming generation when its HTTP client goes away.

Why: a streaming response notices a disconnect when Starlette cancels its
body iterator, but a plain handler would run its generation to the end for
nobody. Racing it against the ASGI `http.disconnect` message lets the
cancellation reach the generator's gRPC stream, which stops it.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

from fastapi import Request

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client left before its response was ready; there is nobody to answer."""


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait([task, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled():
        raise ClientDisconnected()
    return task.result()
