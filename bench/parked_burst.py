"""make bench-parked-burst: one node (gunicorn from gunicorn.conf.py, 2 processes) and N long-polls
sent as a burst, as a fleet of idle workers sends them after a deploy, then what a load balancer's
health check, a producer and a woken worker see beside them. bench/parked.py opens its polls at a
paced rate and probes over kept-alive connections; this one sends them all at once and probes
over a new connection each too, optionally with the host busy (a CPU hog on each core).

- The burst: N `GET /jobs/next?wait_ms=30000` on a queue nobody sends to, from HOLDERS client
  processes at once (one asyncio process opens about 3000 connections a second here: one alone
  was a ramp, not a burst).
- While the node opens them: `GET /healthz` on a new connection every 100 ms, each sample's time
  (how long the node took to answer at all is what this shows).
- Once every poll is parked (the node holds N connections, answered the last 3 of those health
  checks within 100 ms, and its CPU stayed under 15 % of a core for 1.5 s): PROBES samples
  each of `GET /healthz` and `POST /jobs`, on a new connection each and on one kept-alive
  connection each, one after another 10 ms apart; then WAKES wakes of a poll parked on another
  queue, from sending `POST /jobs` to the poll's answer.
- Every idle poll's answer at the end of its wait (204), and how late.

Each sample is printed as `t:ms` (t: seconds since the burst began), then p50/p99/max; all of it
goes to bench-out/bench-parked-burst.json. `python bench/parked_burst.py [N]`; BENCH_PARKED_HOG=1
adds the hogs (nice 0, one per core, started before the node), BENCH_PARKED_HOLDERS the number of
client processes (4).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import parked  # bench/parked.py, a script beside this one
from parked import Client, Poll, pct, request_bytes

N = int(os.environ.get("BENCH_PARKED_N", "10000"))
HOLDERS = int(os.environ.get("BENCH_PARKED_HOLDERS", "4"))
HOG = os.environ.get("BENCH_PARKED_HOG", "") not in ("", "0")
WAIT_S = 30.0
PROBES = 100
WAKES = 50
IDLE_QUEUE, WAKE_QUEUE, PROBE_QUEUE = "burst-idle", "burst-wake", "burst-probe"
HOG_CODE = "while True: pass"
OPENING = "while opening: /healthz, new connection"


@dataclass
class Burst:
    n: int
    hog: bool
    base_fds: int = 0
    opened_s: float = 0.0  # the node held N connections (accepted)
    parked_s: float = 0.0  # and its CPU settled
    load: list[str] = field(default_factory=list)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    answers: dict[str, int] = field(default_factory=dict)
    late_ms: list[float] = field(default_factory=list)

    def add(self, name: str, t: float, ms: float) -> None:
        self.series.setdefault(name, []).append((round(t, 2), round(ms, 1)))

    def rows(self) -> dict[str, Any]:
        rows: dict[str, Any] = {
            "polls": self.n,
            "CPU hog on each core": self.hog,
            "the node held them all after s": round(self.opened_s, 1),
            "parked (its CPU settled) after s": round(self.parked_s, 1),
        }
        for name, samples in self.series.items():
            ms = [m for _, m in samples]
            rows[f"{name} p50/p99/max ms (n)"] = (
                round(pct(ms, 0.5), 1), round(pct(ms, 0.99), 1), max(ms), len(ms)
            )  # fmt: skip
        rows["answers at the end of the wait"] = self.answers
        rows["end-of-wait lateness p50/p99 ms"] = (
            round(pct(self.late_ms, 0.5)), round(pct(self.late_ms, 0.99))
        )  # fmt: skip
        rows["load average (1 min) at the burst, parked, end"] = " ".join(self.load)
        return rows


# -- the holders: client processes that send the burst ----------------------------------------


def hold(port: int, n: int) -> None:
    """`--hold PORT N`: open N polls at once, wait for their answers, print them as JSON."""

    async def run() -> list[Poll]:
        raw = parked.poll_request(port, "next", IDLE_QUEUE, WAIT_S)
        return await asyncio.gather(
            *(parked.one_poll(port, Poll("next", WAIT_S), raw) for _ in range(n))
        )

    parked.raise_open_files()
    polls = asyncio.run(run())
    answers: dict[str, int] = {}
    for p in polls:
        key = p.error or str(p.status)
        answers[key] = answers.get(key, 0) + 1
    late = [(p.answered - p.sent - p.wait_s) * 1000 for p in polls if not p.error]
    print(json.dumps({"answers": answers, "late_ms": late}))


def _holders(port: int, n: int) -> list[subprocess.Popen[str]]:
    share = [n // HOLDERS + (i < n % HOLDERS) for i in range(HOLDERS)]
    me = str(Path(__file__).resolve())
    return [
        subprocess.Popen(
            [sys.executable, me, "--hold", str(port), str(k)], stdout=subprocess.PIPE, text=True
        )
        for k in share
    ]


# -- probes -----------------------------------------------------------------------------------


async def timed(client: Client, raw: bytes) -> float:
    """One request's round trip in ms (a new Client connects first: counted)."""
    t0 = time.perf_counter()
    status, body = await client.call(raw)
    assert status in (200, 201), (status, body)
    return (time.perf_counter() - t0) * 1000


async def _while_opening(port: int, burst: Burst, t0: float, done: asyncio.Event) -> None:
    raw = request_bytes(port, "GET", "/healthz")
    while not done.is_set():
        client = Client(port)
        sent = time.monotonic() - t0
        burst.add(OPENING, sent, await timed(client, raw))
        client.close()
        await asyncio.sleep(0.1)


async def _parked(pids: list[int], n: int, burst: Burst, t0: float, deadline: float) -> bool:
    """Wait until the node holds n more descriptors than before the burst (one a connection),
    has answered the last 3 health checks within 100 ms (a request waits for a thread behind
    every one accepted before it: a prompt answer says none is left to open) and its CPU stayed
    under 15 % of a core for 1.5 s. The CPU alone said "parked" on a busy host while the node
    still waited for the database, starved too, for half of them."""
    while parked.open_fds(pids) < burst.base_fds + n:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    burst.opened_s = time.monotonic() - t0
    quiet = 0
    while quiet < 3 or any(ms >= 100 for _, ms in burst.series.get(OPENING, [])[-3:]):
        if time.monotonic() > deadline:
            return False
        before = parked.cpu_ticks(pids)
        await asyncio.sleep(0.5)
        busy = (parked.cpu_ticks(pids) - before) / parked.CLK_TCK / 0.5 * 100
        quiet = quiet + 1 if busy < 15 else 0
    burst.parked_s = time.monotonic() - t0
    return True


async def _probes(port: int, burst: Burst, t0: float, deadline: float) -> None:
    """PROBES of each kind, round-robin, 10 ms apart, new and kept-alive connections."""
    healthz = request_bytes(port, "GET", "/healthz")
    enqueue = request_bytes(port, "POST", "/jobs", {"queue": PROBE_QUEUE, "payload": {}})
    kept = {"/healthz": Client(port), "POST /jobs": Client(port)}
    for _ in range(PROBES):
        for name, raw in (("/healthz", healthz), ("POST /jobs", enqueue)):
            if time.monotonic() > deadline:
                return
            fresh = Client(port)
            at = time.monotonic() - t0
            burst.add(f"parked: {name}, new connection", at, await timed(fresh, raw))
            fresh.close()
            await asyncio.sleep(0.01)
            at = time.monotonic() - t0
            burst.add(f"parked: {name}, kept alive", at, await timed(kept[name], raw))
            await asyncio.sleep(0.01)
    for client in kept.values():
        client.close()


async def _wakes(port: int, burst: Burst, t0: float, deadline: float) -> None:
    raw = parked.poll_request(port, "next", WAKE_QUEUE, WAIT_S)
    pending = {asyncio.ensure_future(parked.one_poll(port, Poll("next", WAIT_S), raw))
               for _ in range(WAKES)}  # fmt: skip
    await asyncio.sleep(1.0)  # parked (each opens in milliseconds)
    producer = Client(port)
    enqueue = request_bytes(port, "POST", "/jobs", {"queue": WAKE_QUEUE, "payload": {}})
    while pending and time.monotonic() < deadline:
        at = time.monotonic() - t0
        started = time.perf_counter()
        status, _ = await producer.call(enqueue)
        assert status == 201
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED, timeout=5)
        if not done or done.pop().result().status != 200:
            break
        burst.add("parked: wake", at, (time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.02)
    producer.close()
    for task in pending:
        task.cancel()


async def measure(port: int, pids: list[int], n: int, burst: Burst) -> list[Any]:
    """The burst and the probes; returns the holders (still waiting for their answers)."""
    t0 = time.monotonic()
    deadline = t0 + WAIT_S - 2  # the burst's first polls answer at WAIT_S: measure beside all
    burst.load.append(parked.loadavg())
    burst.base_fds = parked.open_fds(pids)
    holders = _holders(port, n)
    opened = asyncio.Event()
    watch = asyncio.ensure_future(_while_opening(port, burst, t0, opened))
    all_parked = await _parked(pids, n, burst, t0, deadline)
    opened.set()
    await watch
    burst.load.append(parked.loadavg())
    if all_parked:
        await _probes(port, burst, t0, deadline)
        await _wakes(port, burst, t0, deadline)
    return holders


def _collect(holders: list[Any], burst: Burst) -> None:
    for holder in holders:
        out, _ = holder.communicate(timeout=120)
        got = json.loads(out)
        for key, count in got["answers"].items():
            burst.answers[key] = burst.answers.get(key, 0) + count
        burst.late_ms += got["late_ms"]
    burst.load.append(parked.loadavg())


def _print(burst: Burst) -> None:
    for name, samples in burst.series.items():
        print(f"{name} (t:ms)")
        print("  " + " ".join(f"{t:g}:{ms:g}" for t, ms in samples))
    rows = burst.rows()
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        print(f"{key:<{width}}  {value}")


def main() -> None:
    from harness import ROOT, VENV_BIN, broker_database, free_port, start, stop, wait_healthy

    n = int(sys.argv[1]) if len(sys.argv) > 1 else N
    if parked.raise_open_files() < n // HOLDERS + 1000:
        raise SystemExit("the open-file limit is below the polls a holder opens")
    out = ROOT / "bench-out"
    out.mkdir(exist_ok=True)
    cores = os.cpu_count() or 1
    hogs = [subprocess.Popen([sys.executable, "-c", HOG_CODE]) for _ in range(cores if HOG else 0)]
    burst = Burst(n=n, hog=HOG)
    try:
        with broker_database("bench_parked_burst") as (_, env):
            port = free_port()
            cmd = [str(VENV_BIN / "gunicorn"), "-b", f"127.0.0.1:{port}"]
            node = start(cmd, env, out / "gunicorn-parked-burst.log")
            try:
                wait_healthy(port)
                time.sleep(1)  # both workers up
                holders = asyncio.run(measure(port, parked.node_pids(node.pid), n, burst))
                _collect(holders, burst)
            finally:
                stop(node, signal.SIGINT)
    finally:
        for h in hogs:
            h.kill()
    (out / "bench-parked-burst.json").write_text(
        json.dumps({**burst.rows(), "samples": burst.series}, indent=1)
    )
    _print(burst)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hold"]:
        hold(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
