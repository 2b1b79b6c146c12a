"""GET /v1/models: the one model this service fronts, in OpenAI's list shape.

Why one: the service is bound to a single Triton model (the generator); the
name clients pass as `model` must be that name, anything else is a 404.
"""

from __future__ import annotations

from .errors import OpenAIError


def model_card(name: str, created: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "tritongen"}


def model_list(name: str, created: int) -> dict:
    return {"object": "list", "data": [model_card(name, created)]}


def check_model(requested: str, served: str) -> None:
    if requested != served:
        raise OpenAIError(404, f"The model `{requested}` does not exist; this server serves `{served}`.",
                          param="model", code="model_not_found")
