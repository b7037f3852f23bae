"""A broker node whose queries go through PgBouncer in transaction mode, its LISTEN direct.

Needs the pgbouncer binary (Debian package pgbouncer); without it the test skips and says so.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.procs import Proc, free_port, gunicorn, http, needs, wait_until

# serial: asserts wake-ups within 100 ms
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.serial]

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
)


def _answers(port: int) -> bool:
    import psycopg

    try:
        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=1
        ) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


@pytest.fixture
def bounced_url(db_url: str) -> Iterator[str]:
    """db_url, but through a PgBouncer in transaction mode started for this test."""
    needs(PGBOUNCER, "pgbouncer is not installed: `make deps` installs it (apt-get as root)")
    port = free_port()
    # Its own world-readable folder: pgbouncer refuses to run as root and drops to postgres.
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    folder.chmod(0o755)
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n* = host=127.0.0.1 port=5432\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\npool_mode = transaction\n"
        "default_pool_size = 10\nignore_startup_parameters = extra_float_digits,options\n"
    )
    args = [
        PGBOUNCER,
        *(["-u", "postgres"] if os.geteuid() == 0 else []),
        str(folder / "pgbouncer.ini"),
    ]
    proc = Proc(args, dict(os.environ), folder / "pgbouncer.log")
    try:
        wait_until(lambda: _answers(port), 10, 0.1, "pgbouncer to answer")
        yield db_url.replace(":5432/", f":{port}/")
    finally:
        proc.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _wake_ms(enqueue_on: str, parked_on: str, i: int) -> float:
    out: dict = {}

    def park() -> None:
        out["status"], out["body"] = http(
            "GET", f"{parked_on}/jobs/next?wait_ms=5000&queue=probe", timeout=30
        )
        out["at"] = time.monotonic()

    parked = threading.Thread(target=park)
    parked.start()
    time.sleep(0.1)  # the claim reaches its node and parks (alone: a quiet machine)
    start = time.monotonic()
    status, body = http("POST", f"{enqueue_on}/jobs", {"payload": i, "queue": "probe"})
    assert status == 201, body
    parked.join(15)
    assert out["status"] == 200, out
    lease = out["body"]["lease_id"]
    assert http("POST", f"{parked_on}/jobs/{body['id']}/ack?lease_id={lease}")[0] == 204
    return (out["at"] - start) * 1000


def test_node_behind_pgbouncer__listen_url_direct__wakes_and_is_woken_within_100ms(
    db_url: str, bounced_url: str, tmp_path: Path
) -> None:
    with (
        gunicorn(db_url, tmp_path, "direct", WORKERS="1") as direct,
        gunicorn(
            bounced_url,
            tmp_path,
            "bounced",
            WORKERS="1",
            BROKER_DB_PREPARE="False",  # PgBouncer < 1.21 cannot keep prepared statements
            BROKER_LISTEN_DATABASE_URL=db_url,
        ) as bounced,
    ):
        woken = sorted(_wake_ms(direct, bounced, i) for i in range(15))
        waking = sorted(_wake_ms(bounced, direct, i) for i in range(15))
        stats = [http("GET", f"{base}/stats")[1] for base in (direct, bounced)]

    assert woken[-2] < 100, f"claims parked behind PgBouncer woke after (ms) {woken}"
    assert waking[-2] < 100, f"enqueues through PgBouncer woke claims after (ms) {waking}"
    assert stats[0] == stats[1]
    assert stats[0]["totals"]["acked"] == 30
