"""Server-sent events in OpenAI's framing: `data: {json}` per chunk, then `data: [DONE]`.

Why the first chunk is awaited before the response starts: an error the
generator reports at once (a bad schema, a prompt that does not fit) must
still get its 4xx status and error body; once the 200 headers are out, an
error can only travel as an error event, which is what happens mid-stream.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import AsyncGenerator, AsyncIterator

from fastapi.responses import StreamingResponse

from .errors import OpenAIError


def _event(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {data}\n\n".encode("utf-8")


async def event_stream(chunks: AsyncGenerator[dict, None]) -> StreamingResponse:
    """Raises OpenAIError if the stream fails before its first chunk; otherwise streams it all."""
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        first = None
    except BaseException:
        await chunks.aclose()
        raise

    async def body() -> AsyncIterator[bytes]:
        # Cancellation (client disconnect) lands in an await here or in `chunks`;
        # aclosing() then closes `chunks`, which cancels its generator streams.
        async with aclosing(chunks) as rest:
            try:
                if first is not None:
                    yield _event(first)
                async for chunk in rest:
                    yield _event(chunk)
            except OpenAIError as exc:
                yield _event(exc.body())
            yield _event("[DONE]")

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
