"""A module of handlers, as a project of yours would have: the one docs/your-code.md runs
(`queue-broker runworker --handlers images` in this folder). It pretends: every image is
1600 x 1200, and nothing is written."""

from workers import handler
from workers.job import Job

ORIGINAL = (1600, 1200)


@handler(
    "resize_image",
    schema={
        "type": "object",
        "required": ["path", "width"],
        "properties": {
            "path": {"type": "string", "minLength": 1},
            "width": {"type": "integer", "minimum": 1, "maximum": 10_000},
        },
        "additionalProperties": False,
    },
)
def resize(payload: dict, job: Job) -> dict:
    """Resize one image to a width, keeping its proportions."""
    path, width = payload["path"], payload["width"]
    if not path.lower().endswith((".png", ".jpg", ".jpeg")):
        raise ValueError(f"not an image: {path}")
    job.progress(0.5, f"resizing {path}")
    height = round(ORIGINAL[1] * width / ORIGINAL[0])
    stem, _, extension = path.rpartition(".")
    return {"path": f"{stem}-{width}.{extension}", "width": width, "height": height}
