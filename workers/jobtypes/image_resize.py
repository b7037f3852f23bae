"""image_resize: box-downscales a synthetic width x height image, in pure Python (CPU-bound)."""

from __future__ import annotations

import zlib
from typing import Any

from rest_framework import serializers

from workers.jobtypes import JobType
from workers.jobtypes._fields import PayloadSchema, StrictInteger, StrictNumber

MAX_SIDE = 4096


class ResizePayload(PayloadSchema):
    width = StrictInteger(min_value=1, max_value=MAX_SIDE)
    height = StrictInteger(min_value=1, max_value=MAX_SIDE)
    scale = StrictNumber(max_value=1, default=0.5)

    def validate_scale(self, value: float) -> float:
        if value <= 0:
            raise serializers.ValidationError("Must be greater than 0.")
        return value


def resize(width: int, height: int, scale: float) -> dict[str, Any]:
    """Average each source pixel into its target cell: work proportional to width * height."""
    out_w, out_h = max(1, round(width * scale)), max(1, round(height * scale))
    sums = [0] * (out_w * out_h)
    counts = [0] * (out_w * out_h)
    columns = [x * out_w // width for x in range(width)]
    for y in range(height):
        row = (y * out_h // height) * out_w
        for x, column in enumerate(columns):
            cell = row + column
            sums[cell] += (x * 7 + y * 13) & 0xFF  # a synthetic gradient pixel
            counts[cell] += 1
    pixels = bytes(total // n for total, n in zip(sums, counts, strict=True))
    return {
        "source": {"width": width, "height": height},
        "resized": {"width": out_w, "height": out_h},
        "pixels_processed": sum(counts),
        "checksum": zlib.crc32(pixels),
    }


def run(payload: dict[str, Any]) -> dict[str, Any]:
    """The sizes, how many pixels were read, and a checksum of the resized image."""
    return resize(payload["width"], payload["height"], payload["scale"])


JOB_TYPE = JobType(
    name="image_resize",
    schema=ResizePayload,
    run=run,
    description=f"Downscales a synthetic width x height image (each ≤ {MAX_SIDE}) by scale.",
    sample=lambda broker_url: {"width": 320, "height": 240},
)
