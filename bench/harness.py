"""What bench.py and soak.py share: a lean HTTP connection and the broker's processes."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")


class Conn:
    """One keep-alive HTTP connection (the leanest client the standard library has), reopened
    after an error."""

    def __init__(self, port: int, timeout: float = 60) -> None:
        self.port, self.timeout = port, timeout
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            self.c.request(method, path, data, headers)
            resp = self.c.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException):
            self.c.close()
            self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            raise
        return resp.status, (json.loads(raw) if raw else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        args,
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Signals the process group and waits; kills it when it does not stop in 40 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def wait_healthy(port: int) -> None:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            if Conn(port).call("GET", "/healthz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"broker on :{port} did not come up")


def rss_mb(proc: subprocess.Popen) -> float:
    """Resident memory of the process and its children (gunicorn's workers), in MiB."""
    try:
        p = psutil.Process(proc.pid)
        return sum(x.memory_info().rss for x in [p, *p.children(recursive=True)]) / 2**20
    except psutil.NoSuchProcess:
        return float("nan")


@contextmanager
def broker_database(prefix: str, durable: bool = True) -> Iterator[tuple[str, dict[str, str]]]:
    """A fresh, migrated PostgreSQL database, and the environment of a broker on it: (its URL,
    the environment). Dropped afterwards, whoever still holds a connection.

    durable=False: its commits do not wait for the disk (synchronous_commit off), a diagnostic
    that tells the broker's own latency from this host's fsync stalls; never how it runs."""
    import psycopg

    name = f"{prefix}_{int(time.time())}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        if not durable:
            conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    dsn = f"{PG}/{name}"
    env = dict(
        os.environ, DATABASE_URL=dsn, DEBUG="False", SECRET_KEY="bench-only",
        ALLOWED_HOSTS="127.0.0.1", LOG_LEVEL="WARNING",
    )  # fmt: skip
    try:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        yield dsn, env
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
