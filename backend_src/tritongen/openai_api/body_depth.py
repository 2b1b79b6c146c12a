"""The request body's nesting, bounded before FastAPI parses it.

Why before: FastAPI's json.loads and pydantic recurse once per level, so a body nested thousands deep fails inside
them (a RecursionError, which FastAPI answers with a 400 that names nothing). Scanned first with the bound every
door holds (json_depth), such a body is refused naming the top-level field it nests in, and nothing parses it.
"""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from ..json_depth import MAX_JSON_DEPTH, deeper_than, too_deep
from .disconnect import ClientDisconnected
from .errors import invalid


def check_body_depth(body: bytes) -> None:
    """Each top-level field may nest MAX_JSON_DEPTH levels, as the generator input it becomes may."""
    field = deeper_than(body, MAX_JSON_DEPTH + 1)  # the body's own object is one level more
    if field is not None:
        raise invalid(str(too_deep(field or "the request body", MAX_JSON_DEPTH)), field or None)


class DepthBoundedRoute(APIRoute):
    """A route whose body is scanned (check_body_depth) before FastAPI parses it."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            try:
                body = await request.body()
            except ClientDisconnect:  # gone, or cut off by the Guard (which answers 413): nobody to answer here
                raise ClientDisconnected() from None
            check_body_depth(body)
            return await handler(request)

        return bounded
