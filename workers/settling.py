"""The client's batch verbs: claim many, settle many, and settle-and-claim in one round trip."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from contract.wording import counted
from workers.transport import Response
from workers.wire import (
    BODY_REFUSED,
    MAX_ERROR_CHARS,
    NOT_TOLD,
    SETTLED,
    BrokerError,
    Claimed,
    Delivery,
    Settle,
)

log = logging.getLogger("workers.client")


class BatchVerbs:
    """API.md's "Batch endpoints", mixed into BrokerClient, whose plumbing they use."""

    _jobs_url: str
    _claim_margin_s: float
    _read_timeout_s: float
    _lease_ends: dict[str, float]

    # BrokerClient's plumbing.
    _send: Callable[..., Response | None]
    _until: Callable[[Iterable[str]], float]
    _remember: Callable[[Response, Sequence[Delivery], int], None]

    def claim_many(
        self, max_n: int, wait_ms: int, lease_ms: int, queues: Sequence[str] = ()
    ) -> list[Delivery]:
        """POST /jobs/claim. 1 to max_n deliveries, or [] on 204 or after cancel_claims().

        Retries like claim(); raises BrokerError on any other unexpected answer.
        """
        return self.settle_and_claim((), (), max_n, wait_ms, lease_ms, queues).deliveries

    def settle_and_claim(
        self,
        acks: Sequence[Settle],
        nacks: Sequence[Settle],
        max_n: int,
        wait_ms: int,
        lease_ms: int,
        queues: Sequence[str] = (),
    ) -> Claimed:
        """POST /jobs/claim with acks and nacks: settled first, then up to max_n claimed.

        Without settles it is a plain claim: retried forever, cut by cancel_claims(). With
        settles it is never cut (choose a short wait_ms) and is retried until the first of
        their leases ends (after a 503, as BrokerClient says). A body the broker refuses (400,
        413) is settled through POST /jobs/ack and /jobs/nack instead, which find the culprit;
        the claim then waits for the next call. Raises BrokerError, its .settled telling what
        became of the settles, when the broker refuses the claim itself (401, ...).
        """
        items = _ack_items(acks) + _nack_items(nacks)
        body: dict[str, Any] = {"max": max_n, "wait_ms": wait_ms, "lease_ms": lease_ms}
        if queues:
            body["queues"] = list(queues)
        if acks:
            body["acks"] = items[: len(acks)]
        if nacks:
            body["nacks"] = items[len(acks) :]
        # Settles are committed before the claim waits, and may take as long as any request
        # first (while the broker's database is away, its pool timeout, then a 503): a read
        # timeout of wait + margin would cut that 503 off, and with it the outage's grace.
        settling_s = self._read_timeout_s if items else 0.0
        response = self._send(
            "POST",
            f"{self._jobs_url}/claim",
            until=self._until(item["lease_id"] for item in items) if items else None,
            body=body,
            read_timeout_s=wait_ms / 1000 + self._claim_margin_s + settling_s,
            interruptible=not items,
            held=bool(items),
        )
        if response is None:
            if items:
                log.error(
                    "could not settle %s before the first lease ended", counted(len(items), "task")
                )
                self._forget(items)
            return Claimed([NOT_TOLD] * len(items), [])
        status = response.status_code
        if items and status in BODY_REFUSED:
            return Claimed(self.settle(acks, nacks), [])
        if status not in (200, 204):
            raise BrokerError(status, error_text(response), settled=self.settle(acks, nacks))
        try:
            answer = response.json() if status == 200 else {}
            deliveries: list[Delivery] = answer.get("deliveries", [])
            statuses = _statuses(answer.get("results", []), items) if items else []
            for delivery in deliveries:
                delivery["lease_id"]  # a body without it is unreadable
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BrokerError(200, "claim answered with an unreadable body") from exc
        self._remember(response, deliveries, lease_ms)
        self._report(items, statuses)
        return Claimed(statuses, deliveries)

    def settle(self, acks: Sequence[Settle], nacks: Sequence[Settle]) -> list[int]:
        """POST /jobs/ack and /jobs/nack: a status per item, acks then nacks.

        Retries until the first lease among them ends (after a 503, as BrokerClient says;
        NOT_TOLD then). A whole body the broker
        refuses (400, 413) is split until each refused item stands alone with its status.
        """
        return self._settle_many("ack", _ack_items(acks)) + self._settle_many(
            "nack", _nack_items(nacks)
        )

    def ack_many(self, acks: Sequence[Settle]) -> list[bool]:
        """POST /jobs/ack of (task id, lease id, result) items; per item True when acked.

        Raises TypeError/ValueError if a result is not JSON-serializable.
        """
        return [status == SETTLED for status in self._settle_many("ack", _ack_items(acks))]

    def nack_many(self, nacks: Sequence[Settle]) -> list[bool]:
        """POST /jobs/nack of (task id, lease id, error) items; per item True when nacked."""
        return [status == SETTLED for status in self._settle_many("nack", _nack_items(nacks))]

    def _settle_many(self, verb: str, items: list[dict[str, Any]]) -> list[int]:
        """One POST /jobs/{verb}s (split on 400/413); a status per item."""
        if not items:
            return []
        response = self._send(
            "POST",
            f"{self._jobs_url}/{verb}",
            until=self._until(item["lease_id"] for item in items),
            body={f"{verb}s": items},
            held=True,
        )
        if response is None:
            log.error(
                "could not %s %s before the first lease ended", verb, counted(len(items), "task")
            )
            self._forget(items)
            return [NOT_TOLD] * len(items)
        status = response.status_code
        if status in BODY_REFUSED and len(items) > 1:
            half = len(items) // 2
            return self._settle_many(verb, items[:half]) + self._settle_many(verb, items[half:])
        if status == 200:
            try:
                statuses = _statuses(response.json()["results"], items)
            except (ValueError, KeyError, TypeError) as exc:
                raise BrokerError(200, f"{verb} answered with an unreadable body") from exc
        else:
            log.warning(
                "%s of %s answered %s: %s",
                verb,
                counted(len(items), "task"),
                status,
                error_text(response),
            )
            statuses = [status] * len(items)
        self._report(items, statuses, verb)
        return statuses

    def _report(self, items: list[dict[str, Any]], statuses: list[int], verb: str = "") -> None:
        """Forget the leases that are over; log each refusal."""
        for item, status in zip(items, statuses, strict=True):
            if status not in BODY_REFUSED:
                self._lease_ends.pop(item["lease_id"], None)
            if status != SETTLED:
                what = verb or ("ack" if "result" in item else "nack")
                log.warning("%s of task %s answered %s", what, item["id"], status)

    def _forget(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self._lease_ends.pop(item["lease_id"], None)


def _ack_items(acks: Sequence[Settle]) -> list[dict[str, Any]]:
    return [{"id": t, "lease_id": lease, "result": r} for t, lease, r in acks]


def _nack_items(nacks: Sequence[Settle]) -> list[dict[str, Any]]:
    return [{"id": t, "lease_id": lease, "error": e[:MAX_ERROR_CHARS]} for t, lease, e in nacks]


def _statuses(results: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[int]:
    """Per item, the status the broker gave it (results come in the order given)."""
    if len(results) == len(items):
        return [int(r["status"]) for r in results]
    by_id = {r.get("id"): int(r["status"]) for r in results}
    return [by_id.get(item["id"], NOT_TOLD) for item in items]


def error_text(response: Response) -> str:
    """The broker's {"error": ...} sentence, or the start of the raw body."""
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason or ""
