"""JSON rendering with orjson: fast, and able to splice stored JSON text in unchanged."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from rest_framework.renderers import BaseRenderer

from contract.limits import MAX_ANSWER_BYTES


class FastJSONRenderer(BaseRenderer):
    media_type = "application/json"
    format = "json"
    charset = None

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        if data is None:
            return b""
        return rendered(data)


def rendered(data: Any) -> bytes:
    """`data` as the answer's JSON."""
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        # JSON may carry a lone surrogate (`"\\ud800"`), UTF-8 cannot: an answer echoing one
        # from the request (an unknown field's name, a refused value) says U+FFFD instead.
        return orjson.dumps(_encodable(data))


# What a page's answer holds beside its items: `{"results": [...], "next": "<its URL>"}`.
_PAGE_FRAME = 512


def up_to_answer_size(items: Iterable[Any]) -> list[orjson.Fragment]:
    """The items, rendered, in order, until the answer passes MAX_ANSWER_BYTES: the one that
    takes it past is the last (so the first always goes). Rendered once: the answer splices
    them in."""
    taken: list[orjson.Fragment] = []
    size = _PAGE_FRAME
    for item in items:
        if size > MAX_ANSWER_BYTES:
            break
        text = rendered(item)
        size += len(text) + 1  # and its comma
        taken.append(orjson.Fragment(text))
    return taken


def _encodable(data: Any) -> Any:
    if isinstance(data, str):
        return data.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(data, dict):
        return {_encodable(key): _encodable(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_encodable(item) for item in data]
    return data
