"""image_resize: box-downscales a synthetic width x height image, in pure Python (CPU-bound)."""

from __future__ import annotations

from rest_framework import serializers

from contract.fields import PayloadSchema, StrictInteger, StrictNumber
from contract.jobtypes import JobSpec

MAX_SIDE = 4096


class ResizePayload(PayloadSchema):
    width = StrictInteger(min_value=1, max_value=MAX_SIDE)
    height = StrictInteger(min_value=1, max_value=MAX_SIDE)
    scale = StrictNumber(max_value=1, default=0.5)
    json_schema_rules = {"scale": {"exclusiveMinimum": 0}}

    def validate_scale(self, value: float) -> float:
        if value <= 0:
            raise serializers.ValidationError("Must be greater than 0.")
        return value


SPEC = JobSpec(
    name="image_resize",
    schema=ResizePayload,
    description=f"Downscales a synthetic width x height image (each ≤ {MAX_SIDE}) by scale.",
    sample=lambda broker_url: {"width": 320, "height": 240},
)
