"""Real processes for tests: gunicorn, runsweeper, runworker, produce on free ports, by PID."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def python(
    code: str, env: dict[str, str] | None = None, *, timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`python -c code` in a fresh interpreter at the project root, its output as text."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(db_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        DEBUG="False",
        SECRET_KEY="test-only-secret-key",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
        LOG_LEVEL=extra.pop("LOG_LEVEL", "WARNING"),
    )
    env.update(extra)
    return env


class Proc:
    """A child process with its output in a file, stopped by PID."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT) -> None:
        self.args, self.log_path = args, log
        self._log = open(log, "wb")
        self.popen = subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        if not self._log.closed:  # still running; after stop() the whole output is on disk
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def send(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """The process and its children (gunicorn's workers)."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def stop(self, timeout: float = 10) -> None:
        if self.popen.poll() is None:
            self.kill_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill_group(signal.SIGKILL)
                self.popen.wait(5)
        else:
            self.kill_group(signal.SIGKILL)  # orphans of a dead master
        self._log.close()


def needs(present: object, what: str) -> None:
    """Skip, saying how to get it, when a system tool is missing; under CI (CI=1, as .ci/run
    sets after `make deps`) fail instead: there a missing tool means the test never ran."""
    if present:
        return
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"CI: {what}")
    pytest.skip(what)


def self_signed_cert(tmp: Path) -> tuple[Path, Path]:
    """A throwaway certificate and key for 127.0.0.1 (the openssl CLI; no Python dependency)."""
    openssl = shutil.which("openssl")
    needs(openssl, "needs the openssl command to make a test certificate")
    assert openssl is not None
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


def tls_client_context() -> ssl.SSLContext:
    """Trusts anything: for the test's own self-signed broker on 127.0.0.1 only."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def http(
    method: str, url: str, body: Any = None, timeout: float = 10, headers: dict | None = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(  # noqa: S310 -- http://127.0.0.1 only
        url, data=data, method=method, headers=headers or {}
    )
    if data is not None:
        req.add_header("Content-Type", "application/json")
    context = tls_client_context() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(  # noqa: S310 -- loopback only
            req, timeout=timeout, context=context
        ) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None


def wait_until(check: Any, timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@contextmanager
def gunicorn(
    db_url: str, tmp: Path, name: str = "broker", tls: tuple[Path, Path] | None = None, **env: str
) -> Iterator[str]:
    """A broker from gunicorn.conf.py on a free port; yields its base URL (https:// when `tls`,
    a (certfile, keyfile) pair, is given)."""
    port = free_port()
    tls_args = ["--certfile", str(tls[0]), "--keyfile", str(tls[1])] if tls else []
    proc = Proc(
        [
            str(VENV_BIN / "gunicorn"),
            "-b",
            f"127.0.0.1:{port}",
            "--workers",
            env.pop("WORKERS", "2"),
            *tls_args,
        ],
        child_env(db_url, **env),
        tmp / f"{name}.log",
    )
    base = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(base, proc), 30, 0.1, f"{name} to answer /healthz")
        yield base
    finally:
        proc.stop()


def gunicorn_processes(port: int, workers: int = 2) -> tuple[Any, list[Any]]:
    """(master, workers) of the gunicorn listening on `port`, as psutil processes, once all its
    workers are forked."""
    import psutil

    (pid,) = {
        c.pid
        for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid
    }
    found = psutil.Process(pid)
    master = found if found.children() else found.parent()
    forked = wait_until(lambda: len(master.children()) == workers and master.children(), 30)
    return master, forked


@contextmanager
def two_brokers(db_url: str, tmp: Path) -> Iterator[tuple[str, str]]:
    """Two one-worker brokers "a" and "b" on the same database: their base URLs."""
    with (
        gunicorn(db_url, tmp, "a", WORKERS="1") as a,
        gunicorn(db_url, tmp, "b", WORKERS="1") as b,
    ):
        yield a, b


def enqueue_batch(base: str, jobs: list[dict[str, Any]]) -> list[str]:
    """POST /jobs/batch to the broker at base (201 asserted): the new ids."""
    status, body = http("POST", f"{base}/jobs/batch", {"jobs": jobs})
    assert status == 201, body
    return body["ids"]


def _healthy(base: str, proc: Proc) -> bool:
    if proc.popen.poll() is not None:
        raise AssertionError(f"gunicorn exited early:\n{proc.output()}")
    try:
        return http("GET", f"{base}/healthz", timeout=1)[0] == 200
    except OSError:
        return False


def manage(args: list[str], db_url: str, tmp: Path, name: str, **env: str) -> Proc:
    return Proc([sys.executable, "manage.py", *args], child_env(db_url, **env), tmp / f"{name}.log")


@contextmanager
def running(proc: Proc) -> Iterator[Proc]:
    try:
        yield proc
    finally:
        proc.stop()


def sweeper(
    db_url: str, tmp: Path, name: str = "sweeper", interval_ms: int = 100, **env: str
) -> Proc:
    return manage(["runsweeper", "--interval-ms", str(interval_ms)], db_url, tmp, name, **env)


@contextmanager
def sweeping(
    db_url: str, tmp: Path, interval_ms: int, name: str = "sweeper", **env: str
) -> Iterator[Proc]:
    """runsweeper, once it has started sweeping: a loaded machine takes seconds to boot it, and
    a test timing a promotion or a reclaim would time the boot."""
    proc = sweeper(db_url, tmp, name, interval_ms, **env)
    with running(proc):
        wait_until(lambda: "sweeper running" in proc.output(), 60, 0.05, f"{name}'s start")
        yield proc
