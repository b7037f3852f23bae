"""Schedules: periodic tasks, each a POST /jobs body enqueued once per due time by the sweeper.

Due times come from a cron expression in a time zone (cronsim: strict parsing, daylight-saving
gaps and repeats handled as cron does) or fall every `every_s` seconds from the moment the
timing was set. fire_due() locks due rows with SKIP LOCKED and, in the same transaction,
enqueues (through broker.queue) and moves next_run_at past now: however many sweepers run, a due
time enqueues one task, and a stretch of missed due times enqueues one.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.db import IntegrityError, connection, transaction

from broker import queue, validation
from broker.exceptions import BrokerError, InvalidFields, InvalidTaskError
from broker.models import Schedule
from broker.queue import NewTask, dependencies
from broker.queue.base import current_time
from contract.conf import broker_settings
from contract.limits import (
    MAX_CRON,
    MAX_EVERY_S,
    MAX_TIMEZONE,
    SCHEDULE_NAME_RE,
    SCHEDULE_NAME_RULE,
)

log = logging.getLogger(__name__)

FIELDS = frozenset({"name", "cron", "timezone", "every_s", "job", "paused"})
TIMING = ("cron", "timezone", "every_s")
DEFAULT_TIMEZONE = "UTC"


class ScheduleNotFound(BrokerError):
    """No such schedule."""

    status_code = 404


class ScheduleExists(BrokerError):
    """A schedule with this name exists."""

    status_code = 409


class ScheduleError(InvalidFields):
    """A schedule the API answers with a 400; `fields` names each problem."""


# -- due times ------------------------------------------------------------------------------------


def next_due(schedule: Schedule, after: datetime) -> datetime:
    """The schedule's first due time strictly after `after`."""
    if schedule.every_s:
        step = timedelta(seconds=schedule.every_s)
        passed = (after - schedule.anchored_at) // step  # whole steps, floored
        return schedule.anchored_at + (passed + 1) * step
    zone = ZoneInfo(schedule.timezone or DEFAULT_TIMEZONE)
    return next(CronSim(schedule.cron or "", after.astimezone(zone))).astimezone(UTC)


# -- checking a body ------------------------------------------------------------------------------


def _timing(body: dict[str, Any], current: Schedule | None) -> dict[str, Any]:
    """cron, timezone and every_s after `body` is applied to `current` (None: a new one)."""
    now = {k: getattr(current, k) for k in TIMING} if current else dict.fromkeys(TIMING)
    if body.get("every_s") is not None and body.get("cron") is None:
        now.update(cron=None, timezone=None)
    if body.get("cron") is not None and body.get("every_s") is None:
        now.update(every_s=None, timezone=now["timezone"] or DEFAULT_TIMEZONE)
    now.update({k: body[k] for k in TIMING if k in body})
    if now["cron"] is not None and now["timezone"] is None:
        now["timezone"] = DEFAULT_TIMEZONE
    return now


def _timing_problems(timing: dict[str, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    cron, zone, every = timing["cron"], timing["timezone"], timing["every_s"]
    if (cron is None) == (every is None):
        found["cron"] = ["Give either cron (with an optional timezone) or every_s."]
        return found
    if every is not None:
        if type(every) is not int or not 1 <= every <= MAX_EVERY_S:
            found["every_s"] = [f"Must be an integer from 1 to {MAX_EVERY_S}."]
        if zone is not None:
            found["timezone"] = ["Only a cron schedule has a time zone."]
        return found
    if not isinstance(zone, str) or not _zone_ok(zone):
        found["timezone"] = ["Not a time zone name (like Europe/Paris or UTC)."]
    if not isinstance(cron, str) or len(cron) > MAX_CRON or len(cron.split()) != 5:
        found["cron"] = [f"Must be a cron expression of 5 fields, at most {MAX_CRON} characters."]
    else:
        try:
            CronSim(cron, datetime.now(UTC))
        except (CronSimError, ValueError) as exc:
            found["cron"] = [f"Not a cron expression: {exc}."]
    return found


def _zone_ok(zone: str) -> bool:
    # ZoneInfo reads the name as a path under the tz database: a folder ("America") raises
    # IsADirectoryError, a name over the file system's limit OSError; neither is a zone.
    if len(zone) > MAX_TIMEZONE:
        return False
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def _job_problems(job: Any) -> tuple[str | None, dict[str, list[str]]]:
    """(the job as stored JSON text, problems): validated as POST /jobs validates a body."""
    try:
        spec = validation.new_task(job)
        if spec.after:  # the tasks it names, as the enqueue will find them
            dependencies.check(spec.after, spec.after_policy, "after")
    except InvalidTaskError as exc:
        # "body" is the enqueue body as a whole (say, null): here that is the job itself.
        return None, {
            "job" if name in ("", "body") else f"job.{name}": msgs
            for name, msgs in exc.fields.items()
        }
    if spec.idempotency_key is not None:
        # One key would make every due time after the first enqueue nothing.
        return None, {
            "job.idempotency_key": [
                "A schedule's job cannot carry one: each due time enqueues a task of its own."
            ]
        }
    return validation.dump_json(job), {}


def checked(body: Any, current: Schedule | None) -> dict[str, Any]:
    """A POST (current None) or PATCH body → the schedule's fields after it. Raises
    ScheduleError naming every problem."""
    if not isinstance(body, dict):
        raise ScheduleError({"body": ["Must be a JSON object."]})
    found = {k: ["Unknown field."] for k in body if k not in FIELDS}
    values: dict[str, Any] = {}
    if current is None:
        name = body.get("name")
        if not isinstance(name, str) or not SCHEDULE_NAME_RE.fullmatch(name):
            found["name"] = [f"Required: a name matching {SCHEDULE_NAME_RULE}."]
        values["name"] = name
    elif "name" in body and body["name"] != current.name:
        found["name"] = ["A schedule cannot be renamed."]
    timing = _timing(body, current)
    found.update(_timing_problems(timing))
    values.update(timing)
    if "job" in body or current is None:
        if "job" not in body:
            found["job"] = ["Required: the body of a POST /jobs."]
        else:
            values["job"], job_found = _job_problems(body["job"])
            found.update(job_found)
    if "paused" in body:
        if type(body["paused"]) is not bool:
            found["paused"] = ["Must be true or false."]
        values["paused"] = body["paused"]
    if found:
        raise ScheduleError(found)
    return values


def over_the_cap() -> dict[str, list[str]]:
    """The problem with one more schedule when BROKER_MAX_SCHEDULES exist already (a
    ScheduleError's fields), else nothing."""
    most = broker_settings.BROKER_MAX_SCHEDULES
    if Schedule.objects.count() < most:
        return {}
    return {
        "name": [f"At most {most} schedules may exist (BROKER_MAX_SCHEDULES): delete one first."]
    }


# -- changes --------------------------------------------------------------------------------------


def _named(name: str) -> str:
    """The name, when one could exist; a name no schedule can have (say, with U+0000, which
    PostgreSQL refuses in a query) is ScheduleNotFound without asking the database."""
    if not SCHEDULE_NAME_RE.fullmatch(name):
        raise ScheduleNotFound()
    return name


def get(name: str) -> Schedule:
    found = Schedule.objects.filter(name=_named(name)).first()
    if found is None:
        raise ScheduleNotFound()
    return found


# An advisory lock's key (any constant): held by a creation from its count to its commit.
_CREATING = 0x5C4ED01E


def create(body: Any) -> Schedule:
    """A new schedule from a POST /schedules body. Raises ScheduleError (a 400: a bad body, or
    BROKER_MAX_SCHEDULES exist already), ScheduleExists.

    Creations take turns from their count to their commit (an advisory lock on PostgreSQL;
    SQLite's IMMEDIATE transactions already do), so racing ones never make one too many.
    """
    values = checked(body, None)
    now = current_time()
    schedule = Schedule(**values, anchored_at=now, created_at=now)
    schedule.next_run_at = None if schedule.paused else next_due(schedule, now)
    try:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CREATING])
            if over := over_the_cap():
                # A name taken is that (409) at the cap too: no schedule would be one more.
                if Schedule.objects.filter(name=schedule.name).exists():
                    raise ScheduleExists()
                raise ScheduleError(over)
            schedule.save(force_insert=True)
    except IntegrityError as exc:
        raise ScheduleExists() from exc
    return schedule


def update(name: str, body: Any) -> Schedule:
    """Apply a PATCH body. A timing change recomputes next_run_at; a resume fires next at the
    first due time after now, not for the paused stretch. Raises ScheduleError, ScheduleNotFound.
    """
    name = _named(name)
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().filter(name=name).first()
        if schedule is None:
            raise ScheduleNotFound()
        values = checked(body, schedule)
        now = current_time()
        retimed = any(values[k] != getattr(schedule, k) for k in TIMING)
        resumed = schedule.paused and values.get("paused") is False
        for key, value in values.items():
            setattr(schedule, key, value)
        if retimed:
            schedule.anchored_at = now
        if schedule.paused:
            schedule.next_run_at = None
        elif retimed or resumed or schedule.next_run_at is None:
            schedule.next_run_at = next_due(schedule, now)
        schedule.save()
    return schedule


def set_paused(names: list[str], paused: bool) -> int:
    """Pause or resume many schedules in one transaction (admin); returns how many changed
    (one already so is left as it is, its next run untouched)."""
    with transaction.atomic():
        changing = sorted(
            Schedule.objects.select_for_update()
            .filter(name__in=names)
            .exclude(paused=paused)
            .values_list("name", flat=True)
        )
        for name in changing:
            update(name, {"paused": paused})
    return len(changing)


def delete(name: str) -> None:
    if not Schedule.objects.filter(name=_named(name)).delete()[0]:
        raise ScheduleNotFound()


def fire_due(limit: int = 100, due_by: datetime | None = None) -> int:
    """Enqueue one task for each of up to `limit` schedules due (by now, or by `due_by` if that
    is earlier), and move each past now; returns how many.

    SKIP LOCKED: a due row another sweeper holds is its to fire; one it has fired no longer
    matches when its lock goes (READ COMMITTED reads the row again). The tasks (one batch
    enqueue), their counts and the new next_run_at commit together, or none of them.
    """
    with transaction.atomic():
        now = current_time()
        due = list(
            Schedule.objects.filter(
                paused=False, next_run_at__lte=now if due_by is None else min(now, due_by)
            )
            .order_by("next_run_at")
            .select_for_update(skip_locked=True)[:limit]
        )
        for schedule, task_id in zip(due, _enqueue_all(due), strict=True):
            schedule.last_task_id = task_id
            schedule.last_run_at = now
            schedule.next_run_at = next_due(schedule, now)
        if due:
            _save_fired(due, now)
    return len(due)


# Every fired schedule's last task and next due time in one statement (bulk_update's CASE per
# row cost PostgreSQL 2 ms a schedule to build).
_SAVE_FIRED = (
    "UPDATE broker_schedule AS s SET last_task_id = f.task, last_run_at = %(now)s,"
    " next_run_at = f.next FROM unnest(%(names)s::varchar[], %(tasks)s::bigint[],"
    " %(nexts)s::timestamptz[]) AS f(name, task, next) WHERE s.name = f.name"
)


def _save_fired(due: list[Schedule], now: datetime) -> None:
    if connection.vendor != "postgresql":
        for schedule in due:  # SQLite: a statement each is still cheaper than bulk_update's
            Schedule.objects.filter(pk=schedule.pk).update(
                last_task_id=schedule.last_task_id, last_run_at=now,
                next_run_at=schedule.next_run_at,
            )  # fmt: skip
        return
    params = {
        "now": now,
        "names": [s.name for s in due],
        "tasks": [s.last_task_id for s in due],
        "nexts": [s.next_run_at for s in due],
    }
    with connection.cursor() as cursor:
        cursor.execute(_SAVE_FIRED, params)


def _enqueue_all(due: list[Schedule]) -> list[int | None]:
    """Each schedule's task (None: its job is no longer valid), enqueued in one batch."""
    specs = [_spec(schedule) for schedule in due]
    valid = [spec for spec in specs if spec is not None]
    if not valid:
        return [None] * len(due)
    try:
        with transaction.atomic():  # a savepoint: one refused leaves the others to fire
            ids = iter(queue.enqueue_many(valid))
    except InvalidTaskError:
        # One waits for a task that can no longer let it run: each on its own, to skip it.
        return [_enqueue(s, spec) for s, spec in zip(due, specs, strict=True)]
    return [None if spec is None else next(ids) for spec in specs]


def _spec(schedule: Schedule) -> NewTask | None:
    # A job valid when saved may not be now (a job type removed since, a task it waits for
    # cancelled): this due time is skipped, saying why, and the sweeper goes on.
    try:
        return validation.new_task(json.loads(schedule.job))
    except InvalidTaskError as exc:
        _skipped(schedule, exc)
        return None


def _enqueue(schedule: Schedule, spec: NewTask | None) -> int | None:
    if spec is None:
        return None
    try:
        with transaction.atomic():  # a savepoint, as in _enqueue_all
            pk, _ = queue.enqueue(spec)
    except InvalidTaskError as exc:
        _skipped(schedule, exc)
        return None
    return pk


def _skipped(schedule: Schedule, exc: InvalidTaskError) -> None:
    log.warning("schedule %s: its job is no longer valid (%s); nothing enqueued",
                schedule.name, exc)  # fmt: skip
