"""The handler a worker of this project runs: `python manage.py runworker --handlers shop.jobs
--broker http://127.0.0.1:8000/queue`."""

from shop.models import Order
from workers import handler
from workers.job import Job


@handler(
    "ship_order",
    schema={
        "type": "object",
        "required": ["order"],
        "properties": {"order": {"type": "integer", "minimum": 1}},
        "additionalProperties": False,
    },
)
def ship(payload: dict, job: Job) -> dict:
    """Ship one order: mark it shipped."""
    job.progress(0.5, f"shipping order {payload['order']}")
    shipped = Order.objects.filter(pk=payload["order"], state="new").update(state="shipped")
    return {"order": payload["order"], "shipped": bool(shipped)}
