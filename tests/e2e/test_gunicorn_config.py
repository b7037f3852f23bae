"""gunicorn as gunicorn.conf.py sets it up: it preloads the app (the master imports Django and
forks the workers, so nothing made at import may be shared by them: each worker's database
connections are its own, and the master holds none); its control socket is off unless a path is
given."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from tests.procs import VENV_BIN, gunicorn, gunicorn_processes, http, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _database_sockets(proc: psutil.Process, db_port: int) -> set[tuple[str, int]]:
    """The local addresses of proc's TCP connections to the database's port."""
    return {
        (c.laddr.ip, c.laddr.port)
        for c in proc.net_connections(kind="tcp")
        if c.raddr and c.raddr.port == db_port
    }


def test_preloaded_broker__workers_connect_on_their_own__master_holds_no_connection(
    db_url: str, tmp_path: Path
) -> None:
    with gunicorn(db_url, tmp_path, "preload") as base:
        port = int(base.rsplit(":", 1)[1])
        # Enough requests on fresh connections that both workers serve some.
        for _ in range(40):
            assert http("GET", f"{base}/stats")[0] == 200
        master, workers = gunicorn_processes(port)

        db_port = urlsplit(db_url).port or 5432
        assert _database_sockets(master, db_port) == set()
        per_worker = [_database_sockets(w, db_port) for w in workers]
        assert all(per_worker), "each worker serves from its own connection"
        assert per_worker[0].isdisjoint(per_worker[1]), "a connection shared across the fork"


def test_control_socket__off_unless_a_path_is_given(db_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with gunicorn(db_url, tmp_path, "plain", HOME=str(home), XDG_RUNTIME_DIR=""):
        assert not (home / ".gunicorn").exists()  # gunicorn's default place for it

    path = tmp_path / "broker.ctl"
    with gunicorn(db_url, tmp_path, "ctl", HOME=str(home), GUNICORN_CONTROL_SOCKET=str(path)):
        # The master binds it from a thread of its own once the workers are forked, which may
        # be after a worker answered the health check.
        wait_until(path.exists, 10, 0.05, "the control socket")
        shown = subprocess.run(
            [str(VENV_BIN / "gunicornc"), "-s", str(path), "-c", "show workers"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert shown.returncode == 0, shown.stderr
    assert "Total: 2 workers" in shown.stdout
