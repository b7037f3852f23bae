"""Answers and parked polls stay bounded, and a flood of schedules does not stall the sweeper:
what one node (gunicorn, one process) answers and holds in memory, measured from outside.

- answers: 10 parents acked with results of 261 KB each, 20 children enqueued `after` all ten;
  then `GET /jobs?limit=20`, `POST /jobs/claim` of 20 (the rest claimed after, to count them),
  and `GET /workflows/{id}` of a workflow of 30 steps dead with errors of 200 KB: each answer's
  size, how many items it carries, and the process's RSS before and after;
- parked: POLLS SQS ReceiveMessage long-polls whose bodies are padded to 3 MiB, parked on an
  empty queue: the process's RSS before and once they are parked, per poll;
- schedules (`python bench/bounded.py schedules`): a sweeper beside 1500 `every_s: 1`
  schedules; a task claimed with a 300 ms lease and one delayed 300 ms: how long after its time
  each is moved (reclaimed, promoted).

`python bench/bounded.py [answers|parked|schedules]` (default: all); prints one JSON object.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    ROOT,
    VENV_BIN,
    Conn,
    broker_database,
    free_port,
    rss_mb,
    start,
    stop,
    wait_healthy,
)

RESULT_BYTES = 261_000
POLLS = 40
PAD = int(os.environ.get("BENCH_BOUNDED_BODY", str(3 * 1_048_576)))  # a parked poll's body
SCHEDULES = 1500


def _raw(port: int, method: str, path: str, body: object = None) -> tuple[int, bytes]:
    """A request on a new connection; the answer's status and body, unparsed (its size)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, raw


def answers(port: int, proc: Any) -> dict[str, Any]:
    c = Conn(port)
    parents = []
    for i in range(10):
        _, made = c.call("POST", "/jobs", {"payload": {"parent": i}, "queue": "parents"})
        parents.append(made["id"])
    for _ in parents:
        _, got = c.call("GET", "/jobs/next?wait_ms=0&queue=parents")
        status, _ = c.call(
            "POST",
            f"/jobs/{got['task']['id']}/ack?lease_id={got['lease_id']}",
            {"result": "r" * RESULT_BYTES},
        )
        assert status == 204, status
    for i in range(20):
        c.call("POST", "/jobs", {"payload": {"child": i}, "queue": "children", "after": parents})
    out: dict[str, Any] = {"rss_mb_start": round(rss_mb(proc), 1)}
    status, raw = _raw(port, "GET", "/jobs?limit=20&queue=children")
    page = json.loads(raw)
    out["list_20_bytes"], out["list_20_items"] = len(raw), len(page["results"])
    out["list_20_next"] = page["next"] is not None
    out["rss_mb_after_list"] = round(rss_mb(proc), 1)
    status, raw = _raw(
        port, "POST", "/jobs/claim", {"max": 20, "wait_ms": 0, "queues": ["children"]}
    )
    first = json.loads(raw)["deliveries"]
    out["claim_20_bytes"], out["claim_20_deliveries"] = len(raw), len(first)
    out["rss_mb_after_claim"] = round(rss_mb(proc), 1)
    claimed = [d["task"]["id"] for d in first]
    while True:
        status, raw = _raw(
            port, "POST", "/jobs/claim", {"max": 20, "wait_ms": 0, "queues": ["children"]}
        )
        if status == 204:
            break
        claimed += [d["task"]["id"] for d in json.loads(raw)["deliveries"]]
    out["children_claimed_in_all"] = len(claimed)
    out["children_claimed_distinct"] = len(set(claimed))
    out.update(_workflow(port, c))
    out["rss_mb_after_workflow"] = round(rss_mb(proc), 1)
    return out


def _workflow(port: int, c: Conn) -> dict[str, Any]:
    steps = [{"ref": f"s{i}", "job": {"payload": i, "queue": "wf", "max_attempts": 1}}
             for i in range(30)]  # fmt: skip
    _, made = c.call("POST", "/workflows", {"name": "errors", "steps": steps})
    for _ in steps:
        _, got = c.call("GET", "/jobs/next?wait_ms=0&queue=wf")
        c.call(
            "POST",
            f"/jobs/{got['task']['id']}/nack?lease_id={got['lease_id']}",
            {"error": "e" * 200_000},
        )
    _, raw = _raw(port, "GET", f"/workflows/{made['id']}")
    return {"workflow_30_dead_steps_bytes": len(raw)}


def parked(port: int, proc: Any) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/sqs/bounded"
    _sqs(port, "CreateQueue", {"QueueName": "bounded"})
    body = {"QueueUrl": url, "WaitTimeSeconds": 20}
    pad = PAD - len(json.dumps({**body, "Pad": ""})) - 64
    body["Pad"] = "p" * pad
    data = json.dumps(body).encode()
    time.sleep(1)
    before = rss_mb(proc)
    socks = []
    for _ in range(POLLS):
        s = socket.create_connection(("127.0.0.1", port))
        head = (
            "POST /sqs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.0\r\n"
            f"X-Amz-Target: AmazonSQS.ReceiveMessage\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        s.sendall(head.encode() + data)
        socks.append(s)
        time.sleep(0.1)  # one at a time: RSS then counts what a parked poll keeps, not the peak
    time.sleep(3)
    after = rss_mb(proc)
    for s in socks:
        s.close()
    return {
        "parked_polls": POLLS,
        "parked_body_bytes": len(data),
        "parked_rss_mb_before": round(before, 1),
        "parked_rss_mb_after": round(after, 1),
        "parked_rss_kib_per_poll": round((after - before) * 1024 / POLLS, 1),
    }


def _sqs(port: int, action: str, body: dict[str, Any]) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(
        "POST",
        "/sqs",
        json.dumps(body).encode(),
        {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"},
    )
    resp = conn.getresponse()
    raw = resp.read()
    return resp.status, json.loads(raw or b"{}")


def schedules(port: int, env: dict[str, str], out_dir: Path) -> dict[str, Any]:
    c = Conn(port)
    started = time.monotonic()
    for i in range(SCHEDULES):
        status, _ = c.call(
            "POST", "/schedules", {"name": f"flood-{i}", "every_s": 1, "job": {"payload": i}}
        )
        assert status == 201, status
    made_s = time.monotonic() - started
    sweeper = start(
        [sys.executable, "manage.py", "runsweeper"], env, out_dir / "bounded-sweeper.log"
    )
    swept_from = time.monotonic()
    try:
        time.sleep(3)  # the flood fires a few times first
        late_reclaim, late_promote = [], []
        for _ in range(5):
            c.call("POST", "/jobs", {"payload": "leased", "queue": "lease"})
            _, got = c.call("GET", "/jobs/next?wait_ms=0&lease_ms=300&queue=lease")
            expires = time.monotonic() + 0.3
            _, delayed = c.call(
                "POST", "/jobs", {"payload": "late", "queue": "delay", "delay_ms": 300}
            )
            due = time.monotonic() + 0.3
            late_reclaim.append(_until(c, got["task"]["id"], "handed_out") - expires)
            late_promote.append(_until(c, delayed["id"], "delayed") - due)
            for q in ("lease", "delay"):
                while (got := c.call("GET", f"/jobs/next?wait_ms=0&queue={q}"))[0] == 200:
                    c.call(
                        "POST", f"/jobs/{got[1]['task']['id']}/ack?lease_id={got[1]['lease_id']}"
                    )
    finally:
        swept_s = time.monotonic() - swept_from
        stop(sweeper)
    _, stats = c.call("GET", "/stats")
    return {
        "schedules": SCHEDULES,
        "schedules_made_s": round(made_s, 2),
        "lease_reclaimed_late_s": [round(x, 2) for x in late_reclaim],
        "delay_promoted_late_s": [round(x, 2) for x in late_promote],
        "enqueued_by_schedules": stats["totals"]["enqueued"] - 10,
        "schedules_fired_per_s": round((stats["totals"]["enqueued"] - 10) / swept_s),
        "load_average": os.getloadavg()[0],
    }


def _until(c: Conn, task_id: str, state: str, limit_s: float = 20) -> float:
    """time.monotonic() when the task is no longer in `state` (polled every 20 ms)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        _, task = c.call("GET", f"/jobs/{task_id}")
        if task["state"] != state:
            return time.monotonic()
        time.sleep(0.02)
    return float("inf")


def main() -> None:
    only = sys.argv[1] if len(sys.argv) > 1 else None
    out_dir = ROOT / "bench-out"
    out_dir.mkdir(exist_ok=True)
    results: dict[str, Any] = {}
    with broker_database("bench_bounded") as (_, env):
        port = free_port()
        env = {**env, "WEB_CONCURRENCY": "1", "BROKER_RETENTION": "0"}
        gunicorn = str(VENV_BIN / "gunicorn")
        proc = start([gunicorn, "-b", f"127.0.0.1:{port}"], env, out_dir / "bounded.log")
        try:
            wait_healthy(port)
            if only in (None, "answers"):
                results.update(answers(port, proc))
            if only in (None, "parked"):
                results.update(parked(port, proc))
            if only in (None, "schedules"):
                results.update(schedules(port, env, out_dir))
        finally:
            stop(proc)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
