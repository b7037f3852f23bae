"""A pg_auto_failover formation for a test, through deploy/ha/formation.sh (what `make ha-up`
runs), and a probe that tells when a new primary takes writes."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.procs import ROOT, needs

SCRIPT = ROOT / "deploy" / "ha" / "formation.sh"


def installed() -> bool:
    """pg_autoctl and the monitor's extension, as `make deps` installs them."""
    return bool(shutil.which("pg_autoctl")) and any(
        Path("/usr/lib/postgresql").glob("*/lib/pgautofailover.so")
    )


class Formation:
    """The formation in `home`: a monitor and node1..node3; `url` is its DATABASE_URL."""

    def __init__(self, home: Path, database: str) -> None:
        self.env = {**os.environ, "HA_DIR": str(home), "HA_DB": database}
        self.home = home
        self.url = ""

    def run(self, *args: str, timeout: float = 180) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"formation.sh {' '.join(args)}: {done.stderr}{done.stdout}")
        return done.stdout.strip()

    def up(self) -> str:
        out = self.run("up")
        self.url = out.rpartition("DATABASE_URL=")[2].strip()
        return self.url

    def primary(self) -> str:
        return self.run("primary", timeout=30)

    def kill(self, node: str) -> None:
        self.run("kill", node, timeout=30)

    def start(self, node: str) -> None:
        self.run("start", node, timeout=30)

    def wait_healthy(self) -> None:
        self.run("wait-healthy")

    def nodes(self) -> dict[str, int]:
        """node name -> port, from the URL (node1 first)."""
        ports = [
            int(hp.rpartition(":")[2]) for hp in urlsplit(self.url).netloc.split("@")[1].split(",")
        ]
        return {f"node{i}": port for i, port in enumerate(ports, 1)}

    def save_logs(self, to: Path) -> None:
        to.mkdir(parents=True, exist_ok=True)
        for log in self.home.glob("*.log"):
            shutil.copy(log, to / log.name)


@contextmanager
def formation(logs: Path, database: str) -> Iterator[Formation]:
    """A formation built for the test and removed after it (its logs copied to `logs`)."""
    needs(
        installed(),
        "needs pg_auto_failover: make deps installs postgresql-15-auto-failover and "
        "pg-auto-failover-cli",
    )
    # Not under pytest's tmp_path: as root the nodes run as postgres, which must reach HA_DIR.
    home = Path(tempfile.mkdtemp(prefix="ha_failover_")) / "formation"
    home.parent.chmod(0o755)
    ha = Formation(home, database)
    try:
        ha.up()
        yield ha
    finally:
        if home.exists():
            ha.save_logs(logs)
        ha.run("down", timeout=60)
        shutil.rmtree(home.parent, ignore_errors=True)


class Writable:
    """Tries a write on every node every 20 ms (its own table, its own connections) and keeps
    when each node took one: the moment a new primary takes writes, seen from outside."""

    def __init__(self, ha: Formation) -> None:
        import psycopg

        self._psycopg = psycopg
        self.ports = ha.nodes()
        self.user = urlsplit(ha.url).username or "postgres"
        self.database = urlsplit(ha.url).path.lstrip("/")
        self.writes: list[tuple[float, str]] = []  # (monotonic, node)
        self._conns: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        with self._connect(next(iter(self.ports.values()))) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS ha_probe (at timestamptz DEFAULT now())")

    def _connect(self, port: int) -> Any:
        return self._psycopg.connect(
            host="127.0.0.1", port=port, dbname=self.database, user=self.user,
            connect_timeout=1, autocommit=True,
        )  # fmt: skip

    def __enter__(self) -> Writable:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for conn in self._conns.values():
            conn.close()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for node, port in self.ports.items():
                try:
                    conn = self._conns.get(node)
                    if conn is None:
                        conn = self._conns[node] = self._connect(port)
                        conn.execute("SET statement_timeout = 1000")
                    conn.execute("INSERT INTO ha_probe DEFAULT VALUES")
                    self.writes.append((time.monotonic(), node))
                except self._psycopg.errors.ReadOnlySqlTransaction:
                    pass  # a standby, or a promoted one not yet taking writes: ask again
                except Exception:  # refused, cut, timed out: a new connection next time
                    stale = self._conns.pop(node, None)
                    if stale is not None:
                        stale.close()

    def first_after(self, at: float, other_than: str) -> float | None:
        return min((t for t, node in self.writes if t > at and node != other_than), default=None)
