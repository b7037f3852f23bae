"""Fault-test harness: a restartable broker on a fixed port, keyed producers, the final audit."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any

from broker import queue
from broker.models import Task, TaskError
from tests.procs import VENV_BIN, Proc, child_env, free_port, http, manage, wait_until

LEASE_EXPIRED = "lease expired"


def held(base: str, queue: str) -> tuple[str, str]:
    """A task of `queue` claimed under a 1.5 s lease: (id, lease id)."""
    assert http("POST", f"{base}/jobs", {"payload": {}, "queue": queue})[0] == 201
    status, got = http("GET", f"{base}/jobs/next?queue={queue}&wait_ms=0&lease_ms=1500")
    assert status == 200, got
    return got["task"]["id"], got["lease_id"]


class Claim(threading.Thread):
    """One GET /jobs/next, answered (or not) in the background."""

    def __init__(self, base: str, queue: str, wait_ms: int) -> None:
        super().__init__(daemon=True)
        self.url = f"{base}/jobs/next?queue={queue}&wait_ms={wait_ms}"
        self.status: int | None = None
        self.body: Any = None  # the answer's JSON; or what went wrong, when no answer came
        self.answered_at = 0.0
        self.start()

    def run(self) -> None:
        try:
            self.status, self.body = http("GET", self.url, timeout=60)
        except (OSError, HTTPException, ValueError) as exc:
            self.body = repr(exc)
        self.answered_at = time.monotonic()


class Enqueuers:
    """`threads` loops of POST /jobs (queue "probe"), each answer kept: (sent, answered, status,
    idempotency key)."""

    def __init__(self, base: str, threads: int) -> None:
        self.base = base
        self.answers: list[tuple[float, float, int, str]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Enqueuers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            body = {"payload": {}, "queue": "probe", "idempotency_key": uuid.uuid4().hex}
            sent = time.monotonic()
            try:
                status, _ = http("POST", f"{self.base}/jobs", body, timeout=30)
            except (OSError, HTTPException):
                status = 0
            self.answers.append((sent, time.monotonic(), status, body["idempotency_key"]))
            self._stop.wait(0.02)

    def first_write_after(self, at: float, *, sent: bool = False) -> float | None:
        """When the first 201 answered after `at` came (`sent`: for a request sent after it)."""
        done = [answered for sent_at, answered, status, _ in self.answers
                if status == 201 and (sent_at if sent else answered) > at]  # fmt: skip
        return min(done, default=None)


class Broker:
    """gunicorn (gunicorn.conf.py) that can be killed and started again on the same port."""

    def __init__(
        self, db_url: str, tmp: Path, workers: int = 2, name: str = "broker", **env: str
    ) -> None:
        self.db_url, self.tmp, self.workers, self.name, self.env = db_url, tmp, workers, name, env
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: Proc | None = None
        self.starts = 0

    def start(self, timeout: float = 30) -> None:
        self.starts += 1
        self.proc = Proc(
            [
                str(VENV_BIN / "gunicorn"),
                "-b",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(self.workers),
            ],
            child_env(self.db_url, **self.env),
            self.tmp / f"{self.name}-{self.starts}.log",
        )
        wait_until(self._healthy, timeout, 0.1, "the broker to answer /healthz")

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.popen.poll() is not None:
            raise AssertionError(f"gunicorn exited early:\n{self.proc.output()}")
        try:
            return http("GET", f"{self.base}/healthz", timeout=1)[0] == 200
        except (OSError, HTTPException):
            return False

    def output(self) -> str:
        """What gunicorn and its workers logged since the last start."""
        assert self.proc is not None
        return self.proc.output()

    def kill9(self) -> None:
        """SIGKILL the master and its workers at once (one process group)."""
        assert self.proc is not None
        self.proc.kill_group(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stop()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


@dataclass
class Producers:
    """`threads` producers, each enqueueing `per_thread` tasks with an idempotency key and
    retrying each one (same key) until the broker takes it or `give_up_s` passes.

    `accepted` maps key -> task id for every task the broker confirmed (201, or 200 for a retry
    whose first answer was lost); `statuses` counts every answer (-1: not JSON), `errors`
    every send that got no answer.
    """

    base: str
    threads: int
    per_thread: int
    body: dict[str, Any] = field(default_factory=dict)
    pause_s: float = 0.0
    fail_every: int = 0  # every n-th task of a producer asks to fail ({"fail": true})
    give_up_s: float = 60.0
    accepted: dict[str, str] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)  # keys of the tasks that ask to fail
    statuses: Counter[int] = field(default_factory=Counter)
    errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def wanted(self) -> int:
        return self.threads * self.per_thread

    def start(self) -> Producers:
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(self.threads)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def join(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "producers still running"

    def _run(self, n: int) -> None:
        for i in range(self.per_thread):
            key = uuid.uuid4().hex
            payload: dict[str, Any] = {"producer": n, "i": i}
            if self.fail_every and i % self.fail_every == 0:
                payload["fail"] = True
                self.failing.add(key)
            body = {**self.body, "payload": payload, "idempotency_key": key}
            end = time.monotonic() + self.give_up_s
            while time.monotonic() < end:
                try:
                    status, answer = http("POST", f"{self.base}/jobs", body, timeout=15)
                except (OSError, HTTPException):  # refused, reset, or cut mid-answer
                    status, answer = 0, None
                except ValueError:  # an answer that is not JSON: counted as status -1
                    status, answer = -1, None
                with self._lock:
                    if status:
                        self.statuses[status] += 1
                    else:
                        self.errors += 1
                    if status in (200, 201):
                        self.accepted[key] = answer["id"]
                if status in (200, 201):
                    break
                time.sleep(0.1)
            time.sleep(self.pause_s)


def workers(
    base: str, db_url: str, tmp: Path, log: Path, n: int, *args: str, first: int = 0
) -> list[Proc]:
    """n runworker processes appending to `log`; their own output in worker-<first + i>.log."""
    return [
        manage(
            ["runworker", "--broker", base, "--log-file", str(log), "--wait-ms", "2000", *args],
            db_url,
            tmp,
            f"worker-{i}",
        )
        for i in range(first, first + n)
    ]


def log_lines(log: Path) -> Counter[str]:
    """How many times each task id was handled (one JSON line per run of the handler)."""
    if not log.exists():
        return Counter()
    return Counter(json.loads(line)["id"] for line in log.read_text().splitlines())


def settled() -> bool:
    """Nothing ready, handed out or delayed: every task has reached a final state."""
    overall, _ = queue.gauges()
    return overall["ready"] + overall["handed_out"] + overall["delayed"] == 0


def audit(accepted: dict[str, str], log: Path) -> dict[int, tuple[str, int, int]]:
    """Every task now: {id: (state, attempts, lease expiries)}; checks what holds for any fault.

    - every accepted task exists (nothing lost), and nothing but accepted tasks exists;
    - attempts never exceed max_attempts;
    - a task ran more than once only after its lease expired (one extra run per expiry);
    - the counters balance.
    """
    rows = {
        pk: (state, attempts, max_attempts)
        for pk, state, attempts, max_attempts in Task.objects.values_list(
            "pk", "state", "attempts", "max_attempts"
        )
    }
    accepted_ids = {int(i) for i in accepted.values()}
    assert accepted_ids <= set(rows), f"lost: {sorted(accepted_ids - set(rows))[:10]}"
    assert set(rows) == accepted_ids, f"unexpected tasks: {sorted(set(rows) - accepted_ids)[:10]}"
    expiries = Counter(
        TaskError.objects.filter(error=LEASE_EXPIRED).values_list("task_id", flat=True)
    )
    runs = log_lines(log)
    for pk, (state, attempts, max_attempts) in rows.items():
        assert attempts <= max_attempts, (pk, attempts, max_attempts)
        assert runs[str(pk)] <= 1 + expiries[pk], (pk, runs[str(pk)], expiries[pk], state)
    totals = queue.totals()
    assert totals["nacked"] + totals["reclaimed"] == totals["retried"] + totals["buried"], totals
    return {pk: (state, attempts, expiries[pk]) for pk, (state, attempts, _) in rows.items()}
