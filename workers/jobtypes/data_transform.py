"""data_transform's handler: uppercases the keys of the input object, trims its string values."""

from __future__ import annotations

from typing import Any

from contract.jobtypes.data_transform import SPEC
from workers import handler


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys uppercased, top-level string values stripped; other values as they are."""
    return {
        key.upper(): value.strip() if isinstance(value, str) else value
        for key, value in payload["input"].items()
    }
