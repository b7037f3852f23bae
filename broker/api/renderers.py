"""JSON rendering with orjson: fast, and able to splice stored JSON text in unchanged."""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework.renderers import BaseRenderer


class FastJSONRenderer(BaseRenderer):
    media_type = "application/json"
    format = "json"
    charset = None

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        if data is None:
            return b""
        try:
            return orjson.dumps(data)
        except orjson.JSONEncodeError:
            # JSON may carry a lone surrogate (`"\\ud800"`), UTF-8 cannot: an answer echoing one
            # from the request (an unknown field's name, a refused value) says U+FFFD instead.
            return orjson.dumps(_encodable(data))


def _encodable(data: Any) -> Any:
    if isinstance(data, str):
        return data.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(data, dict):
        return {_encodable(key): _encodable(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_encodable(item) for item in data]
    return data
