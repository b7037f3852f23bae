"""A stateful fake broker over HTTP, for runner tests through the real client."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any
from urllib.parse import unquote

from tests.worker_fakes import FakeServer, Reply, Seen, delivery


class ApiFake:
    """A stateful broker behind a FakeServer: hands out queued tasks, keeps what is settled.

    Speaks GET /jobs/next, POST /jobs/claim (with acks and nacks), POST /jobs/ack and
    /jobs/nack, and the per-task ack, nack and extend, with API.md's answers.
    """

    def __init__(self, server: FakeServer) -> None:
        """Installs itself as server's responder."""
        self.pending: deque[dict[str, Any]] = deque()
        self.held: dict[str, str] = {}  # task id -> lease id
        self.acked: dict[str, Any] = {}  # task id -> result
        self.nacked: dict[str, list[str]] = {}  # task id -> errors
        self.claim_bodies: list[Any] = []
        self._cond = threading.Condition()
        server.responder = self

    def add(self, task_id: str, payload: Any, *, type_: str | None = None) -> None:
        """Queue a task and wake a parked claim."""
        with self._cond:
            self.pending.append(delivery(task_id, payload, type_=type_))
            self._cond.notify_all()

    def settled(self) -> int:
        """How many tasks were acked or nacked."""
        with self._cond:
            return len(self.acked) + len(self.nacked)

    def __call__(self, seen: Seen) -> Reply | None:
        """Answer seen, or None for paths this fake does not serve."""
        parts = seen.path.split("/")
        if seen.path == "/jobs/next":
            got = self._claim(1, int(seen.query.get("wait_ms", ["0"])[0]))
            return Reply(200, got[0]) if got else Reply(204)
        if seen.path == "/jobs/claim":
            return self._claim_batch(seen.body)
        if seen.path in ("/jobs/ack", "/jobs/nack"):
            verb = seen.path.rsplit("/", 1)[1]
            return Reply(200, {"results": self._settle(verb, seen.body[f"{verb}s"])})
        if len(parts) == 4 and parts[3] in ("ack", "nack", "extend"):
            task_id, lease_id = unquote(parts[2]), seen.query["lease_id"][0]
            if parts[3] == "extend":
                ok = self.held.get(task_id) == lease_id
                return Reply(200, {"deadline": "x"}) if ok else Reply(404, {"error": "No."})
            value = (seen.body or {}).get("result" if parts[3] == "ack" else "error")
            item = {"id": task_id, "lease_id": lease_id, "result": value, "error": value}
            (answer,) = self._settle(parts[3], [item])
            return Reply(answer["status"], None if answer["status"] == 204 else {"error": "No."})
        return None

    def _claim_batch(self, body: Any) -> Reply:
        with self._cond:
            self.claim_bodies.append(body)
        settles = "acks" in body or "nacks" in body
        results = self._settle("ack", body.get("acks", [])) + self._settle(
            "nack", body.get("nacks", [])
        )
        got = self._claim(body["max"], body["wait_ms"])
        if settles:
            return Reply(200, {"results": results, "deliveries": got})
        return Reply(200, {"deliveries": got}) if got else Reply(204)

    def _claim(self, max_n: int, wait_ms: int) -> list[dict[str, Any]]:
        end = time.monotonic() + wait_ms / 1000
        with self._cond:
            while not self.pending and time.monotonic() < end:
                self._cond.wait(end - time.monotonic())
            got = []
            while self.pending and len(got) < max_n:
                item = self.pending.popleft()
                self.held[item["task"]["id"]] = item["lease_id"]
                got.append(item)
            return got

    def _settle(self, verb: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        results = []
        with self._cond:
            for item in items:
                task_id = item["id"]
                if self.held.get(task_id) != item["lease_id"]:
                    results.append({"id": task_id, "status": 404})
                    continue
                del self.held[task_id]
                if verb == "ack":
                    self.acked[task_id] = item.get("result")
                else:
                    self.nacked.setdefault(task_id, []).append(item["error"])
                results.append({"id": task_id, "status": 204})
        return results
