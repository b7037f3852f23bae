"""image_resize's handler: box-downscales a synthetic image, in pure Python (CPU-bound)."""

from __future__ import annotations

import zlib
from typing import Any

from contract.jobtypes.image_resize import SPEC
from workers import handler


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any]) -> dict[str, Any]:
    """Average each source pixel into its target cell: work proportional to width * height.

    The result: the sizes, how many pixels were read, and a checksum of the resized image.
    """
    width, height, scale = payload["width"], payload["height"], payload["scale"]
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
