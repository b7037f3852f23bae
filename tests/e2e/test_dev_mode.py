"""An environment nobody set is production-safe; `make run` asks for development mode itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.procs import ROOT, Proc, free_port, needs, python, wait_until

# What a first-time user's shell does not have (nor the variables of the `make test` running
# this test: a make started under them prints "make[1]:" and shares its jobserver).
UNSET = {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "BROKER_HTTPS", "BROKER_API_TOKENS",
         "BROKER_BIND", "LOG_LEVEL", "SECURE_SSL_REDIRECT", "DATABASE_URL",
         "MAKELEVEL", "MAKEFLAGS", "MFLAGS"}  # fmt: skip


def _fresh_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in UNSET}, **extra}


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    settings_env = _fresh_env(DJANGO_SETTINGS_MODULE="queueproject.settings", **env)
    return python(code, settings_env, timeout=120, check=False)


def test_settings__nothing_set__debug_off_no_dev_key_no_wildcard_host() -> None:
    result = _python(
        "import json; from django.conf import settings as s; "
        "print(json.dumps([s.DEBUG, s.ALLOWED_HOSTS, s._wrapped.SECRET_KEY]))"
    )
    assert result.returncode == 0, result.stderr
    debug, hosts, key = json.loads(result.stdout)
    assert debug is False
    assert "*" not in hosts and set(hosts) == {"localhost", "127.0.0.1", "[::1]"}
    assert key == ""  # never the public development key


def test_settings__debug_asked_for__dev_key() -> None:
    result = _python("from django.conf import settings as s; print(s.SECRET_KEY)", DEBUG="True")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("dev-only-")


def test_worker_commands__nothing_set__run_without_a_secret_key() -> None:
    # README: a worker or producer in a second terminal, no environment to set up.
    result = subprocess.run(
        [sys.executable, "manage.py", "submit", "--list"], cwd=ROOT, capture_output=True,
        text=True, timeout=120, env=_fresh_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "sleep_job" in result.stdout


def _get(url: str, host: str | None = None, accept: str | None = None) -> tuple[int, bytes]:
    headers = {"Host": host} if host else {}
    if accept:
        headers["Accept"] = accept
    request = urllib.request.Request(url, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 -- loopback
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.mark.e2e
def test_make_run__fresh_environment__dev_broker_on_loopback_admin_styled(tmp_path: Path) -> None:
    needs(shutil.which("make"), "needs make")
    port = free_port()
    env = _fresh_env(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",  # as a fresh clone's default
        BROKER_BIND=f"127.0.0.1:{port}",  # 8080 may be taken on a shared machine
        WEB_CONCURRENCY="1", GUNICORN_THREADS="8",
    )  # fmt: skip
    proc = Proc(["make", "--no-print-directory", "run"], env, tmp_path / "make-run.log")
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.popen.poll() is None, proc.output()
        try:
            return _get(f"{base}/healthz")[0] == 200
        except OSError:
            return False

    try:
        wait_until(up, 90, 0.2, "make run to answer /healthz")
        status, page = _get(f"{base}/", accept="text/html,*/*;q=0.8")  # the browser's first look
        assert status == 200 and b'href="/admin/"' in page and b'href="/api/docs/"' in page
        status, page = _get(f"{base}/admin/login/")  # a CSRF token: some key is there
        assert status == 200, page[:500]
        css = "/static/admin/css/base.css"
        assert css.encode() in page
        assert _get(f"{base}{css}")[0] == 200
        assert _get(f"{base}/stats", host=f"localhost:{port}")[0] == 200
        assert _get(f"{base}/stats", host="attacker.example")[0] == 400  # DNS rebinding
        # DEBUG is on, and still no error is an HTML page (Django's technical 404 was).
        for path in ("/dashboard/nope", "/static/nope.js"):
            status, page = _get(f"{base}{path}", accept="text/html,*/*;q=0.8")
            assert (status, json.loads(page)) == (404, {"error": "Not Found."}), page[:200]
        assert f"Listening at: http://127.0.0.1:{port}" in proc.output()
    finally:
        proc.stop()
