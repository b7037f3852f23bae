"""python manage.py schedules [--json]: every schedule, its timing and its next and last runs."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from broker.api.operate import schedule_body
from broker.models import Schedule

COLUMNS = ("name", "timing", "paused", "next_run_at", "last_run_at", "last_task_id", "queue")


class Command(BaseCommand):
    help = "List the schedules: timing, paused, next and last run, the last task enqueued."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="One JSON object per line.")

    def handle(self, *args: Any, **options: Any) -> None:
        bodies = [schedule_body(s) for s in Schedule.objects.order_by("name")]
        if options["json"]:
            for body in bodies:
                self.stdout.write(json.dumps(body))
            return
        if not bodies:
            self.stdout.write("no schedules")
            return
        rows = [COLUMNS, *(_row(body) for body in bodies)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


def _row(body: dict[str, Any]) -> tuple[str, ...]:
    timing = (
        f"every {body['every_s']} s" if body["every_s"] else f"{body['cron']} ({body['timezone']})"
    )
    job = body["job"]
    return (
        body["name"], timing, "yes" if body["paused"] else "no", body["next_run_at"] or "-",
        body["last_run_at"] or "-", body["last_task_id"] or "-",
        job.get("queue", "default") if isinstance(job, dict) else "default",
    )  # fmt: skip
