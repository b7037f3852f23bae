"""manage.py submit: enqueue one sample task per job type over HTTP and watch them finish.

The types, their descriptions and samples are the contract's (contract/jobtypes/): what the
broker accepts, whether or not this process could run them.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from django.core.management.base import CommandError, CommandParser

from contract import netpolicy
from contract.jobtypes import SPECS, order_payment
from contract.limits import DEFAULT_PRIORITY, DEFAULT_QUEUE, PRIORITIES
from contract.wording import counted
from workers.client import BrokerClient, BrokerError, BrokerUnavailableError
from workers.management.commands._common import (
    BrokerCommand,
    api_token,
    log_to_stderr,
    positive_int,
    queue_name,
)
from workers.management.commands._submit_samples import (
    APPROVAL,
    DIAMOND,
    PAYMENT,
    approval_steps,
    diamond_steps,
    enqueue_body,
)
from workers.management.commands._submit_tables import progress_line, table, workflow_table

FINISHED = frozenset({"done", "dead", "cancelled"})
_SAMPLE: Any = object()  # --payload not given (null is a payload like any other)


class TaskClient(BrokerClient):
    """BrokerClient plus GET /jobs/{id} and GET /workflows/{id}, which only this command needs."""

    def task(self, task_id: str) -> dict[str, Any]:
        """GET /jobs/{id}. Raises BrokerError (404, ...) or BrokerUnavailableError."""
        return self._get(f"{self._jobs_url}/{quote(task_id, safe='')}")

    def workflow(self, workflow_id: str) -> dict[str, Any]:
        """GET /workflows/{id}. Raises BrokerError (404, ...) or BrokerUnavailableError."""
        return self._get(f"/workflows/{quote(workflow_id, safe='')}")

    def send_event(self, name: str, key: str, data: Any) -> dict[str, Any]:
        """POST /events. Raises BrokerError unless it is answered 202."""
        status, answer = self._send_or_raise("POST", "/events", {"name": name, "key": key,
                                                                  "data": data})  # fmt: skip
        if status != 202:
            raise BrokerError(status, _error(answer))
        body: dict[str, Any] = answer
        return body

    def _get(self, url: str) -> dict[str, Any]:
        response = self._send("GET", url, until=time.monotonic() + self._give_up_s)
        if response is None:
            raise BrokerUnavailableError(0, f"broker at {self.base_url} unreachable or failing")
        if response.status_code != 200:
            raise BrokerError(response.status_code, _error(_json_or_text(response)))
        body: dict[str, Any] = response.json()
        return body


def _json_or_text(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:200]


def _error(body: Any) -> str:
    if isinstance(body, dict) and "error" in body:
        fields = body.get("fields")
        return f"{body['error']}" + (f" {json.dumps(fields)}" if fields else "")
    return str(body)


def wait_for(
    fetch: Callable[[str], dict[str, Any]],
    ids: Sequence[str],
    *,
    timeout_s: float,
    interval_s: float,
    progress: Callable[[int, int], None] | None = None,
    reported: Callable[[dict[str, Any]], None] | None = None,
    fetched: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Poll each unfinished task until all are done, dead or cancelled, or timeout_s passes;
    `reported(task)` for each task whose progress report is new, `fetched(task)` for each
    task fetched.

    Returns (the tasks' last seen bodies in ids order, whether all finished).
    """
    seen: dict[str, dict[str, Any]] = {}
    end = time.monotonic() + timeout_s
    finished = -1
    while True:
        for task_id in ids:
            if seen.get(task_id, {}).get("state") not in FINISHED:
                before = seen.get(task_id, {}).get("progress")
                seen[task_id] = fetch(task_id)
                now = seen[task_id].get("progress")
                if reported is not None and now is not None and now != before:
                    reported(seen[task_id])
                if fetched is not None:
                    fetched(seen[task_id])
        now_finished = sum(seen[i]["state"] in FINISHED for i in ids)
        if progress is not None and now_finished != finished:
            progress(now_finished, len(ids))
        finished = now_finished
        if finished == len(ids) or time.monotonic() >= end:
            return [seen[i] for i in ids], finished == len(ids)
        time.sleep(interval_s)


class Command(BrokerCommand):
    """Enqueue one sample task of each registered job type (or only --type) over HTTP, then poll
    until every one is done, dead or cancelled and print a status table. Exits 1 if a task was
    refused or the wait timed out.
    """

    def add_arguments(self, parser: CommandParser) -> None:
        """--type, --priority, --no-poll, --list and the usual --broker."""
        super().add_arguments(parser)
        parser.add_argument(
            "--type",
            dest="job_type",
            metavar="T",
            help="submit only this job type (default: one of each)",
        )
        parser.add_argument(
            "--priority",
            default=DEFAULT_PRIORITY,
            choices=PRIORITIES,
            help="(default: %(default)s)",
        )
        parser.add_argument(
            "--queue", type=queue_name, default=DEFAULT_QUEUE, help="(default: %(default)s)"
        )
        parser.add_argument(
            "--max-attempts",
            type=positive_int,
            default=1,
            help="(default: %(default)s, so fail_job goes straight to the DLQ)",
        )
        parser.add_argument(
            "--payload",
            type=_json_value,
            metavar="JSON",
            default=_SAMPLE,
            help="payload to send instead of the sample (needs --type)",
        )
        parser.add_argument(
            "--no-poll", action="store_true", help="print the ids and exit without waiting"
        )
        parser.add_argument(
            "--no-workflow",
            action="store_true",
            help="without --type, also a sample workflow is submitted (a diamond: extract, "
            "then left and right, then load); this leaves it out",
        )
        parser.add_argument(
            "--list",
            action="store_true",
            help="list the job types and their sample payloads, submit nothing",
        )
        parser.add_argument(
            "--approval",
            action="store_true",
            help="submit only a sample workflow whose 'review' step waits for a staff member's "
            "approval in admin (Approvals), and poll until it finishes (give --timeout room)",
        )
        parser.add_argument(
            "--timeout",
            type=positive_int,
            default=120,
            help="seconds to wait for all tasks to finish (default: %(default)s)",
        )
        parser.add_argument(
            "--interval-ms",
            type=positive_int,
            default=250,
            help="poll interval (default: %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """List, or submit then poll; the table goes to stdout, progress to stderr."""
        log_to_stderr(options["verbosity"])
        broker = options["broker"].rstrip("/")
        names = self._chosen_types(options["job_type"], options["payload"])
        if options["approval"]:
            if options["job_type"] is not None or options["list"]:
                raise CommandError("--approval goes without --type and --list")
            names = []
        if options["list"]:
            self._list(names, broker)
            return
        client = TaskClient(broker, token=api_token())
        self._paid: set[str] = set()
        self._broker = broker
        workflow: dict[str, Any] | None = None
        try:
            ids, refused = self._submit(client, names, broker, options)
            steps: list[str] = []
            if options["approval"]:
                workflow_id, steps = self._submit_workflow(
                    client, APPROVAL, approval_steps(options, broker), refused
                )
            elif options["job_type"] is None and not options["no_workflow"]:
                workflow_id, steps = self._submit_workflow(
                    client, DIAMOND, diamond_steps(options), refused
                )
            if options["no_poll"]:
                tasks, all_finished = [client.task(i) for i in ids + steps], True
            else:
                tasks, all_finished = wait_for(
                    client.task,
                    ids + steps,
                    timeout_s=options["timeout"],
                    interval_s=options["interval_ms"] / 1000,
                    progress=self._progress,
                    reported=self._reported,
                    fetched=lambda task: self._pay(client, task),
                )
            if steps:
                workflow = client.workflow(workflow_id)
        except BrokerError as exc:
            raise CommandError(f"broker: {exc}", returncode=1) from exc
        finally:
            client.close()
        if tasks[: len(ids)]:
            self.stdout.write(table(tasks[: len(ids)]))
        if workflow is not None:
            self.stdout.write(workflow_table(workflow, tasks[len(ids) :]))
        if refused:
            raise CommandError(f"refused by the broker: {', '.join(refused)}", returncode=1)
        if not all_finished:
            left = sum(t["state"] not in FINISHED for t in tasks)
            raise CommandError(
                f"{counted(left, 'task')} unfinished after {options['timeout']} s", returncode=1
            )

    def _chosen_types(self, job_type: str | None, payload: Any) -> list[str]:
        names = sorted(SPECS)
        if job_type is not None and job_type not in SPECS:
            raise CommandError(f"unknown job type {job_type!r}; known: {', '.join(names)}")
        if payload is not _SAMPLE and job_type is None:
            raise CommandError("--payload needs --type")
        return [job_type] if job_type else names

    def _list(self, names: list[str], broker: str) -> None:
        for name in names:
            spec = SPECS[name]
            sample: Any = getattr(spec, "sample", lambda url: {})(broker)
            self.stdout.write(f"{name:<16} {getattr(spec, 'description', '')}")
            self.stdout.write(f"{'':<16} sample: {json.dumps(sample)}")

    def _submit(
        self, client: TaskClient, names: list[str], broker: str, options: dict[str, Any]
    ) -> tuple[list[str], list[str]]:
        """Enqueue each type's task; (ids of the accepted ones, names of the refused ones)."""
        ids: list[str] = []
        refused: list[str] = []
        for name in names:
            sample: Any = getattr(SPECS[name], "sample", lambda url: {})
            payload = sample(broker) if options["payload"] is _SAMPLE else options["payload"]
            body = enqueue_body(
                name,
                payload,
                priority=options["priority"],
                queue=options["queue"],
                max_attempts=options["max_attempts"],
            )
            status, answer = client.enqueue(body)
            if status in (200, 201):
                ids.append(answer["id"])
                self.stderr.write(f"submitted {name}: {answer['id']}", style_func=str)
            elif options["payload"] is _SAMPLE and _guarded(status, answer):
                # Our own sample fetches the broker itself, which the SSRF guard refuses by
                # default: a newcomer's demo should not end in an error for it.
                self.stderr.write(
                    f"skipped {name}: its sample fetches the broker at {broker}, an address the "
                    f"broker refuses to fetch by default (SSRF guard); set {netpolicy.SETTING}="
                    "127.0.0.0/8 for broker and worker to try it",
                    style_func=str,
                )
            else:
                refused.append(name)
                self.stderr.write(f"refused {name}: {status} {_error(answer)}", style_func=str)
        return ids, refused

    def _submit_workflow(
        self, client: TaskClient, name: str, steps: list[dict[str, Any]], refused: list[str]
    ) -> tuple[str, list[str]]:
        """POST /workflows with a sample; (its id, its step task ids in order)."""
        status, answer = client.submit_workflow(name, steps)
        if status != 201:
            refused.append(f"workflow {name}")
            self.stderr.write(f"refused workflow: {status} {_error(answer)}", style_func=str)
            return "", []
        self.stderr.write(
            f"submitted workflow {name}: {answer['id']} (GET /workflows/{answer['id']})",
            style_func=str,
        )
        for step in steps:
            waits = step["job"].get("wait_for")
            if waits is not None and waits["event"] == "approval":
                self.stderr.write(
                    f"its step {step['ref']!r} waits for approval: approve it in admin, "
                    f"Approvals ({self._broker}/admin/broker/approval/), key {waits['key']!r}",
                    style_func=str,
                )
        return answer["id"], list(answer["tasks"].values())

    def _progress(self, finished: int, total: int) -> None:
        self.stderr.write(f"{finished}/{total} finished", style_func=str)

    def _reported(self, task: dict[str, Any]) -> None:
        self.stderr.write(f"{task['id']} {progress_line(task)}", style_func=str)

    def _pay(self, client: TaskClient, task: dict[str, Any]) -> None:
        """The sample order waits for its payment: once it does, send the payment's event, as
        a payment provider's webhook would (docs/events.md)."""
        waiting = task.get("waiting") or {}
        if task.get("type") != order_payment.SPEC.name or waiting.get("reason") != "event":
            return
        if task["id"] in self._paid:
            return
        self._paid.add(task["id"])
        key = waiting.get("key") or ""
        answer = client.send_event(order_payment.EVENT, key, PAYMENT)
        self.stderr.write(
            f"{task['id']} order_payment: waits for {order_payment.EVENT!r} {key!r}; sent it "
            f"(POST /events released {answer['released']})",
            style_func=str,
        )


def _guarded(status: int, answer: Any) -> bool:
    """Whether a 400 refused the payload's URL for the address it names (contract/netpolicy)."""
    fields = answer.get("fields") if status == 400 and isinstance(answer, dict) else None
    messages = fields.get("payload.url") if isinstance(fields, dict) else None
    return isinstance(messages, list) and any(netpolicy.SETTING in str(m) for m in messages)


def _json_value(text: str) -> Any:
    """argparse type: any JSON value (the broker judges it against the type's schema)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
