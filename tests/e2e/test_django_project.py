"""examples/django_project end to end: a project made by `django-admin startproject` with only the
contract's two lines added (INSTALLED_APPS, `path("queue/", include("broker.urls"))`) and an app
of its own, run as its owner would (API.md, "Your Django project"; docs/django.md): migrate, its
WSGI app under gunicorn with the broker's parking worker, an order placed by its own view that
enqueues in its transaction, `manage.py runworker --handlers shop.jobs` against the broker under
/queue, a claim over HTTP under the prefix, its admin, `runsweeper`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest

from tests.procs import ROOT, VENV_BIN, Proc, free_port, http, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

EXAMPLE = ROOT / "examples" / "django_project"
PASSWORD = "a-password-for-the-test"


def _env() -> dict[str, str]:
    """The project's own environment: its settings module (manage.py and wsgi.py name it), the
    broker importable as if installed (PYTHONPATH: the checkout), nothing of the test's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BROKER_", "DJANGO_")) and k not in {"DATABASE_URL", "PYTHONPATH"}
    }
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return env


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example (its SQLite database goes beside its manage.py), migrated, with a
    superuser."""
    folder = tmp_path_factory.mktemp("django_project") / "project"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", "db.sqlite3"))
    _manage(folder, "migrate", "--noinput")
    _manage(
        folder, "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com",
        extra={"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )  # fmt: skip
    return folder


def _manage(folder: Path, *args: str, extra: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=folder, env={**_env(), **(extra or {})}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture(scope="module")
def site(project: Path) -> Iterator[str]:
    """The project's WSGI app under gunicorn with the broker's parking worker (docs/django.md,
    "Serving long-polls in production"); its base URL."""
    port = free_port()
    args = [
        str(VENV_BIN / "gunicorn"), "mysite.wsgi", "-k", "broker.parking.worker.ParkingWorker",
        "--threads", "8", "-b", f"127.0.0.1:{port}", "--graceful-timeout", "5",
    ]  # fmt: skip
    proc = Proc(args, _env(), project / "gunicorn.log", cwd=project)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(f"{base}/queue/healthz") == 200, 30, 0.1, "the project")
        yield base
    finally:
        proc.stop()
        print(proc.output())  # noqa: T201 -- shown when the test fails


@pytest.fixture(scope="module")
def worker(project: Path, site: str) -> Iterator[Proc]:
    """The project's own runworker, its handlers in shop/jobs.py, the broker under /queue."""
    args = [
        sys.executable, "manage.py", "runworker", "--handlers", "shop.jobs",
        "--broker", f"{site}/queue", "--queue", "shipping", "--wait-ms", "500",
    ]  # fmt: skip
    proc = Proc(args, _env(), project / "worker.log", cwd=project)
    try:
        wait_until(lambda: "worker on " in proc.output(), 30, 0.1, "the worker's start line")
        yield proc
    finally:
        proc.stop()
        print(proc.output())  # noqa: T201


def _status(url: str) -> int:
    try:
        return http("GET", url, timeout=2)[0]
    except OSError:
        return 0


def _form(url: str, fields: dict[str, str]) -> tuple[int, Any]:
    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, method="POST")  # noqa: S310 -- loopback
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _done(site: str, task_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        task = http("GET", f"{site}/queue/jobs/{task_id}")[1]
        return task if task["state"] in ("done", "dead") else None

    return wait_until(finished, 30, 0.1, f"task {task_id} to finish")


def test_order_placed_in_a_transaction__shipped_by_the_projects_worker(
    project: Path, site: str, worker: Proc
) -> None:
    status, body = _form(f"{site}/orders/", {"item": "a pen"})
    assert status == 201, body
    task = _done(site, body["task"])
    assert task["state"] == "done", task
    assert task["type"] == "ship_order" and task["queue"] == "shipping"
    assert task["result"] == {"order": body["order"], "shipped": True}
    assert re.search(rf"task {body['task']} acked", worker.output()), worker.output()
    # The worker's handler changed the project's own row (shop/jobs.py).
    shown = _manage(project, "shell", "-c", _PRINT_ORDER.format(pk=body["order"]))
    assert shown.strip().endswith("shipped"), shown


_PRINT_ORDER = "from shop.models import Order; print(Order.objects.get(pk={pk}).state)"

# broker.enqueue in the project's transactions: one committed, one rolled back with its order.
_TRANSACTIONS = """
import broker, json
from django.db import transaction
from shop.models import Order

with transaction.atomic():
    kept = Order.objects.create(item="kept")
    kept_task = broker.enqueue({"order": kept.pk}, type="ship_order", queue="shipping")
try:
    with transaction.atomic():
        gone = Order.objects.create(item="rolled back")
        gone_task = broker.enqueue({"order": gone.pk}, type="ship_order", queue="shipping")
        raise RuntimeError("the rest of the transaction failed")
except RuntimeError:
    pass
print(json.dumps({"kept": [kept.pk, kept_task], "gone": gone_task,
                  "orders": list(Order.objects.values_list("item", flat=True))}))
"""


def test_broker_enqueue__in_the_projects_transactions(
    project: Path, site: str, worker: Proc
) -> None:
    shown = json.loads(_manage(project, "shell", "-c", _TRANSACTIONS).strip().splitlines()[-1])
    order, task_id = shown["kept"]
    assert "rolled back" not in shown["orders"]
    assert http("GET", f"{site}/queue/jobs/{shown['gone']}")[0] == 404
    assert _done(site, task_id)["result"] == {"order": order, "shipped": True}


def test_api_under_the_prefix__claim_ack_and_json_errors(site: str) -> None:
    status, body = http("POST", f"{site}/queue/jobs", {"payload": {"n": 1}, "queue": "manual"})
    assert status == 201, body
    status, delivery = http("GET", f"{site}/queue/jobs/next?queue=manual&wait_ms=2000")
    assert status == 200 and delivery["task"]["id"] == body["id"], delivery
    lease = delivery["lease_id"]
    assert http("POST", f"{site}/queue/jobs/{body['id']}/ack?lease_id={lease}", {})[0] == 204
    # A long-poll that finds nothing waits its time out, parked, then answers 204.
    assert http("GET", f"{site}/queue/jobs/next?queue=manual&wait_ms=300")[0] == 204
    for method, path, status in (
        ("GET", "/queue/nope", 404),
        ("DELETE", "/queue/stats", 405),
        ("POST", "/queue/jobs", 400),
    ):
        got, error = http(method, f"{site}{path}", {} if method == "POST" else None)
        assert got == status and isinstance(error["error"], str), (path, got, error)


def test_admin_shows_the_brokers_pages(site: str, worker: Proc) -> None:
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    login = opener.open(f"{site}/admin/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login)
    assert token, login[:500]
    fields = {"username": "ops", "password": PASSWORD, "csrfmiddlewaretoken": token[1],
              "next": "/admin/"}  # fmt: skip
    opener.open(f"{site}/admin/login/", urllib.parse.urlencode(fields).encode(), timeout=10)
    tasks = opener.open(f"{site}/admin/broker/task/", timeout=10)
    assert tasks.status == 200 and "ship_order" in tasks.read().decode()
    types = opener.open(f"{site}/admin/broker/jobtype/", timeout=10).read().decode()
    assert "ship_order" in types
    dashboard = opener.open(f"{site}/queue/dashboard/", timeout=10)
    assert dashboard.status == 200 and "/queue/dashboard/data.json" in dashboard.read().decode()


def test_runsweeper__the_projects_command(project: Path) -> None:
    assert "reclaimed" in _manage(project, "runsweeper", "--once")
