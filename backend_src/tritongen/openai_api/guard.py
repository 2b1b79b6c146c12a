"""What a client must present and may send before the app reads a byte of its body: the API key, the body size.

Why ASGI middleware and not a FastAPI dependency: FastAPI reads and parses
the body before dependencies run, so a client without a key could still
make the server parse a large JSON body. Here the key is checked from the
headers alone, and the body is counted as it arrives (a lying or absent
Content-Length does not get past the count).
"""

from __future__ import annotations

import hmac

from .errors import OpenAIError


class Guard:
    def __init__(self, app, api_key: str | None, max_body_bytes: int):
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes

    @staticmethod
    def _authorized(headers: dict[bytes, bytes], api_key: bytes) -> bool:
        given = headers.get(b"authorization", b"")
        scheme, _, token = given.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), api_key)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.api_key is not None and scope["path"].startswith("/v1") and not self._authorized(headers, self.api_key):
            error = OpenAIError(401, "invalid or missing API key (send it as 'Authorization: Bearer <key>')",
                                code="invalid_api_key")
            return await error.response()(scope, receive, send)
        declared = headers.get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_body_bytes:
            return await self._too_large().response()(scope, receive, send)
        received, over = 0, False

        async def counted():
            nonlocal received, over
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body_bytes:
                over = True  # the app sees the client leave; the 413 goes out below, in its place
                return {"type": "http.disconnect"}
            return message

        async def unless_over(message):
            if not over:
                await send(message)

        await self.app(scope, counted, unless_over)
        if over:
            await self._too_large().response()(scope, receive, send)

    def _too_large(self) -> OpenAIError:
        # The rest of the body stays unread, so the connection cannot carry another request: close it.
        return OpenAIError(413, f"the request body is over the limit of {self.max_body_bytes} bytes",
                           code="request_too_large", headers={"Connection": "close"})
