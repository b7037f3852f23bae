"""make bench-parked: one node (gunicorn from gunicorn.conf.py, 2 processes) holding N parked
long-polls, and what it costs (issue 24's table).

N idle polls (default 10 000), a third each GET /jobs/next (wait_ms=30000), POST /jobs/claim
(wait_ms=30000) and SQS ReceiveMessage (WaitTimeSeconds=20), on queues nobody sends to, the
native ones first and the SQS ones once those are parked, so that all end about together; plus
WAKE_N polls on a queue of their own for the wake measure. Once every poll is parked (the node's
CPU has settled), in this order, each phase stopping at the first idle poll's answer (the row
"samples" says how many it took):

- the node's CPU while they are parked: utime+stime of the gunicorn processes (/proc) over a
  window (up to 5 s) in which no poll answers, as % of one core; and their RSS;
- GET /healthz and POST /jobs latency (one keep-alive connection each, sequential);
- the wake of a parked poll: from sending POST /jobs to the parked poll's answer, one at a time;
- /healthz and POST /jobs again while the idle polls' waits end (they end as they were opened);
- every idle poll's answer at the end of its wait: 204 (native) or SQS's `{}`, none before it,
  and how late.

`python bench/parked.py [N]`; BENCH_PARKED_N, BENCH_PARKED_RATE (polls opened a second),
BENCH_PARKED_SYNC_COMMIT=off (a diagnostic: the database's commits do not wait for the disk, so
the wake's tail shows the broker's part without this host's fsync stalls). The
client is asyncio over raw HTTP/1.1, one connection a poll; tests/e2e/test_parked_fleet.py runs
`measure` at N=1000.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import resource
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

N = int(os.environ.get("BENCH_PARKED_N", "10000"))
RATE = float(os.environ.get("BENCH_PARKED_RATE", "1500"))
WAKE_N = 200  # as the peers harness: a p99 of 100 samples would be their maximum
PROBES = 200
IDLE_QUEUE, WAKE_QUEUE, PROBE_QUEUE, SQS_QUEUE = "parked", "parked-wake", "parked-probe", "parked"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def raise_open_files() -> int:
    """The soft open-file limit raised to the hard one (one descriptor a poll); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- a minimal HTTP/1.1 client --------------------------------------------------------------


def request_bytes(port: int, method: str, path: str, body: Any = None, **headers: str) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    if body is not None:
        lines += [
            f"Content-Type: {headers.pop('content_type', 'application/json')}",
            f"Content-Length: {len(data)}",
        ]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length, chunked = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding":
            chunked = "chunked" in value.lower()
    if not chunked:
        return status, await reader.readexactly(length) if length else b""
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        body += await reader.readexactly(size + 2)
        if size == 0:
            return status, body[:-2]
        body = body[:-2]


class Client:
    """One keep-alive connection, sequential requests."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, raw: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(raw)
        return await read_response(self.reader)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@dataclass
class Poll:
    kind: str  # "next", "claim", "sqs"
    wait_s: float
    sent: float = 0.0
    answered: float = 0.0
    status: int = 0
    body: bytes = b""
    error: str = ""


async def one_poll(port: int, poll: Poll, raw: bytes) -> Poll:
    writer = None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
        poll.sent = time.monotonic()
        writer.write(raw)
        poll.status, poll.body = await read_response(reader)
        poll.answered = time.monotonic()
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        poll.answered = time.monotonic()
        poll.error = type(exc).__name__
    finally:  # cancelled too: the connection closes (the node drops the poll)
        if writer is not None:
            writer.close()
    return poll


def poll_request(port: int, kind: str, queue: str, wait_s: float) -> bytes:
    wait_ms = int(wait_s * 1000)
    if kind == "next":
        return request_bytes(port, "GET", f"/jobs/next?queue={queue}&wait_ms={wait_ms}")
    if kind == "claim":
        return request_bytes(port, "POST", "/jobs/claim", {"queues": [queue], "wait_ms": wait_ms})
    body = {
        "QueueUrl": f"http://127.0.0.1:{port}/sqs/{queue}",
        "WaitTimeSeconds": int(wait_s),
        "MaxNumberOfMessages": 10,
    }
    return request_bytes(
        port, "POST", "/sqs", body,
        content_type="application/x-amz-json-1.0", X_Amz_Target="AmazonSQS.ReceiveMessage",
    )  # fmt: skip


# -- the node from outside: /proc ---------------------------------------------------------


def node_pids(master: int) -> list[int]:
    """The master and its children (gunicorn's workers)."""
    pids = [master]
    for task in Path(f"/proc/{master}/task").iterdir():
        children = Path(f"/proc/{master}/task/{task.name}/children")
        if children.exists():
            pids += [int(p) for p in children.read_text().split()]
    return pids


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total / 1024


def open_fds(pids: list[int]) -> int:
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in pids if os.path.exists(f"/proc/{pid}"))


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[0]


def pct(values: list[float], q: float) -> float:
    """The nearest-rank percentile, as the peers harness and bench.py take it: of 200 wakes, the
    p99 is the 198th (int(q * n) was one rank above: the 199th, and the 101st for the p50)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# -- the measure ----------------------------------------------------------------------------


@dataclass
class Result:
    n: int
    ramp_s: float = 0.0
    ramp_cpu_ms_per_poll: float = 0.0
    expiry_cpu_ms_per_poll: float = 0.0  # upper bound: the probes' tail may fall in it
    settle_s: float = 0.0
    parked_fds: int = 0
    cpu_window_s: float = 0.0
    cpu_pct: float = 0.0
    rss_before_mib: float = 0.0
    rss_mib: float = 0.0
    healthz_ms: list[float] = field(default_factory=list)
    enqueue_ms: list[float] = field(default_factory=list)
    wake_ms: list[float] = field(default_factory=list)
    burst_healthz_ms: list[float] = field(default_factory=list)
    burst_enqueue_ms: list[float] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)
    early: int = 0
    late_ms: list[float] = field(default_factory=list)
    load: str = ""

    def row(self) -> dict[str, Any]:
        def p(v: list[float], q: float) -> float:
            return round(pct(v, q), 1)

        return {
            "parked polls": self.n,
            "opened in s": round(self.ramp_s, 1),
            "CPU settled s after (both waves)": round(self.settle_s, 1),
            "CPU ms a poll opened": round(self.ramp_cpu_ms_per_poll, 2),
            "CPU ms a poll answered at its end": round(self.expiry_cpu_ms_per_poll, 2),
            "node CPU while parked (% of a core)": round(self.cpu_pct, 2),
            "CPU window s": round(self.cpu_window_s, 1),
            "RSS MiB (idle -> parked)": f"{self.rss_before_mib:.0f} -> {self.rss_mib:.0f}",
            "fds of the node": self.parked_fds,
            "GET /healthz p50/p99/max ms": (
                p(self.healthz_ms, 0.5),
                p(self.healthz_ms, 0.99),
                p(self.healthz_ms, 1.0),
            ),
            "POST /jobs p50/p99/max ms": (
                p(self.enqueue_ms, 0.5),
                p(self.enqueue_ms, 0.99),
                p(self.enqueue_ms, 1.0),
            ),
            "wake p50/p99/max ms": (
                p(self.wake_ms, 0.5),
                p(self.wake_ms, 0.99),
                p(self.wake_ms, 1.0),
            ),
            "while waits end: GET /healthz p50/p99/max ms": (
                p(self.burst_healthz_ms, 0.5),
                p(self.burst_healthz_ms, 0.99),
                p(self.burst_healthz_ms, 1.0),
            ),
            "while waits end: POST /jobs p50/p99/max ms": (
                p(self.burst_enqueue_ms, 0.5),
                p(self.burst_enqueue_ms, 0.99),
                p(self.burst_enqueue_ms, 1.0),
            ),
            "samples /healthz, POST /jobs, wakes (none after an idle poll's end)": (
                len(self.healthz_ms),
                len(self.enqueue_ms),
                len(self.wake_ms),
            ),
            "answers at the end of the wait": self.answers,
            "answered early": self.early,
            "end-of-wait lateness p50/p99 ms": (p(self.late_ms, 0.5), p(self.late_ms, 0.99)),
            "load average (1 min)": self.load,
        }


async def _settle(pids: list[int], quiet_pct: float = 15.0, most_s: float = 30.0) -> float:
    """Wait until the node's CPU over 0.5 s is under quiet_pct of a core: every poll parked."""
    started = time.monotonic()
    while time.monotonic() - started < most_s:
        before = cpu_ticks(pids)
        await asyncio.sleep(0.5)
        if (cpu_ticks(pids) - before) / CLK_TCK / 0.5 * 100 < quiet_pct:
            break
    return time.monotonic() - started


async def measure(
    port: int,
    pids: list[int],
    n: int = N,
    rate: float = RATE,
    native_wait_s: float = 30.0,
    sqs_wait_s: float = 20.0,
    cpu_window_s: float = 5.0,
    probes: int = PROBES,
    wakes: int = WAKE_N,
) -> Result:
    """N idle polls against the node on `port` (gunicorn's processes `pids`), then the figures."""
    result = Result(n=n, rss_before_mib=rss_mib(pids))
    setup = Client(port)
    create = request_bytes(
        port, "POST", "/sqs", {"QueueName": SQS_QUEUE},
        content_type="application/x-amz-json-1.0", X_Amz_Target="AmazonSQS.CreateQueue",
    )  # fmt: skip
    status, body = await setup.call(create)
    assert status == 200, body
    # Two waves, the native polls (the longest wait) and then, once the node has parked them, the
    # SQS ones, so that both end together and the window between the last parked and the first
    # ending is as long as it can be. A node opens fewer polls a second than the ramp sends them
    # (each first look waits for one of the pool's connections) and a wait counts from the first
    # look: sent in one ramp, the SQS polls ended ~10 s before the native ones, inside the wakes.
    kinds = ["next", "claim", "sqs"]
    plan = [kinds[i % 3] for i in range(n)]
    waves = [[k for k in plan if k != "sqs"], [k for k in plan if k == "sqs"]]
    idle: list[asyncio.Future[Poll]] = []
    ticks = cpu_ticks(pids)
    for wave in waves:
        started = time.monotonic()
        for i, kind in enumerate(wave):
            wait_s = sqs_wait_s if kind == "sqs" else native_wait_s
            queue = SQS_QUEUE if kind == "sqs" else IDLE_QUEUE
            idle.append(
                asyncio.ensure_future(
                    one_poll(port, Poll(kind, wait_s), poll_request(port, kind, queue, wait_s))
                )
            )
            ahead = started + (i + 1) / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
            elif i % 200 == 0:
                await asyncio.sleep(0)
        result.ramp_s += time.monotonic() - started
        if wave is waves[0]:
            result.settle_s += await _settle(pids)
    wake_tasks = [
        asyncio.ensure_future(
            one_poll(
                port,
                Poll("next", native_wait_s),
                poll_request(port, "next", WAKE_QUEUE, native_wait_s),
            )
        )
        for _ in range(wakes)
    ]
    # The figures are of a node holding all N: each phase below stops at the first idle poll's
    # answer. Polls that end together are the rows "while waits end", measured apart.
    answered = asyncio.Event()
    for task in idle:
        task.add_done_callback(lambda _: answered.set())
    result.settle_s += await _settle(pids)
    result.ramp_cpu_ms_per_poll = (cpu_ticks(pids) - ticks) / CLK_TCK * 1000 / (n + wakes)
    result.parked_fds = open_fds(pids)

    # The window: whole 0.5 s slices up to cpu_window_s, ended by the first idle poll to answer
    # (a window must hold parked polls only; one that answered costs a dispatch).
    before = cpu_ticks(pids)
    t0 = time.monotonic()
    cut = before
    while time.monotonic() - t0 < cpu_window_s and not answered.is_set():
        await asyncio.sleep(0.5)
        if answered.is_set():
            break
        cut = cpu_ticks(pids)
        result.cpu_window_s = time.monotonic() - t0
    if result.cpu_window_s:
        result.cpu_pct = (cut - before) / CLK_TCK / result.cpu_window_s * 100
    result.rss_mib = rss_mib(pids)
    result.load = loadavg()

    async def probe(
        path: str, method: str, body: Any, into: list[float], parked_only: bool = True
    ) -> None:
        client = Client(port)
        raw = request_bytes(port, method, path, body)
        for _ in range(probes):
            if parked_only and answered.is_set():
                break
            t0 = time.perf_counter()
            status, answer = await client.call(raw)
            into.append((time.perf_counter() - t0) * 1000)
            assert status in (200, 201), (path, status, answer)
            await asyncio.sleep(0.01)
        client.close()

    await asyncio.gather(
        probe("/healthz", "GET", None, result.healthz_ms),
        probe("/jobs", "POST", {"queue": PROBE_QUEUE, "payload": {}}, result.enqueue_ms),
    )
    producer = Client(port)
    enqueue = request_bytes(port, "POST", "/jobs", {"queue": WAKE_QUEUE, "payload": {}})
    pending = set(wake_tasks)
    for _ in range(wakes):
        if answered.is_set():
            break
        t0 = time.perf_counter()
        status, _ = await producer.call(enqueue)
        assert status == 201
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED, timeout=5)
        if not done:
            break
        woken = done.pop().result()
        if woken.status != 200:  # its wait ended first: not a wake
            break
        result.wake_ms.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.02)
    producer.close()
    for task in pending:
        task.cancel()
    ticks = cpu_ticks(pids)
    # /healthz and enqueue again while the polls' waits end (in the order they were opened).
    everyone = asyncio.gather(*idle)
    await answered.wait()
    await asyncio.gather(
        probe("/healthz", "GET", None, result.burst_healthz_ms, parked_only=False),
        probe(
            "/jobs",
            "POST",
            {"queue": PROBE_QUEUE, "payload": {}},
            result.burst_enqueue_ms,
            parked_only=False,
        ),
    )
    polls = await everyone
    result.expiry_cpu_ms_per_poll = (cpu_ticks(pids) - ticks) / CLK_TCK * 1000 / n
    for p in polls:
        answer = p.error or _answer(p)
        result.answers[answer] = result.answers.get(answer, 0) + 1
        if not p.error:
            taken = p.answered - p.sent
            if taken < p.wait_s - 0.05:
                result.early += 1
            result.late_ms.append(max(taken - p.wait_s, 0.0) * 1000)
    setup.close()
    return result


def _answer(p: Poll) -> str:
    if p.kind == "sqs":
        return (
            "sqs empty"
            if p.status == 200 and json.loads(p.body or b"{}") == {}
            else f"sqs {p.status}"
        )
    return f"{p.kind} {p.status}"


# -- make bench-parked ----------------------------------------------------------------------


def main() -> None:
    from harness import ROOT, VENV_BIN, broker_database, free_port, start, stop, wait_healthy

    n = int(sys.argv[1]) if len(sys.argv) > 1 else N
    limit = raise_open_files()
    if limit < n + WAKE_N + 200:
        raise SystemExit(f"open-file limit {limit} is below {n} polls; raise the hard limit")
    out = ROOT / "bench-out"
    out.mkdir(exist_ok=True)
    durable = os.environ.get("BENCH_PARKED_SYNC_COMMIT", "on") != "off"
    with broker_database("bench_parked", durable) as (_, env):
        port = free_port()
        node = start(
            [str(VENV_BIN / "gunicorn"), "-b", f"127.0.0.1:{port}"],
            env,
            out / "gunicorn-parked.log",
        )
        try:
            wait_healthy(port)
            time.sleep(1)  # both workers up
            result = asyncio.run(measure(port, node_pids(node.pid), n))
        finally:
            stop(node, signal.SIGINT)
    row = result.row()
    if not durable:
        row["synchronous_commit"] = "off (diagnostic: commits do not wait for the disk)"
    # The wakes themselves too, for another percentile or a plot.
    samples = {"wake_ms": [round(w, 3) for w in result.wake_ms]}
    (out / "bench-parked.json").write_text(json.dumps({**row, **samples}, indent=2))
    width = max(len(k) for k in row)
    for key, value in row.items():
        print(f"{key:<{width}}  {value}")
    spread = statistics.pstdev(result.wake_ms or [0])
    print(f"(wakes measured: {len(result.wake_ms)}, stdev {spread:.1f} ms)")
    if not result.wake_ms:
        raise SystemExit(_unmeasured(result))


def _unmeasured(result: Result) -> str:
    """Why a run measured nothing beside the parked polls: the node was still opening them when
    the first one's wait (30 s) ended."""
    took = result.ramp_s + result.settle_s
    return (
        f"no measure beside {result.n} parked polls: the node took {took:.0f} s to open and"
        f" park them ({result.ramp_cpu_ms_per_poll:.1f} ms of CPU each), and the first idle"
        " poll's wait ended before it was done: this machine is slower or busier than one that"
        " holds that many. Run again when it is quieter, or with fewer polls (BENCH_PARKED_N)."
    )


if __name__ == "__main__":
    main()
