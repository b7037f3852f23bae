"""`pip wheel` of the checkout, installed in a fresh virtualenv outside it: the `queue-broker`
command migrates, serves (pages, static files, the API) and runs a worker and the sweeper with
nothing of the checkout on the path (API.md, "Your own code")."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.procs import ROOT, VENV_BIN, Proc, free_port, http, wait_until

pytestmark = pytest.mark.e2e

# What would point the installed command back at the checkout or at the test's own settings.
_DROP = {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DATABASE_URL", "VIRTUAL_ENV", "BROKER_URL"}


def _checkout_copy(dest: Path) -> Path:
    """The files a fresh clone would have (tracked, and new ones not ignored): the build writes
    build/ and *.egg-info beside them, not into the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a fresh virtualenv holding only the wheel and its dependencies."""
    tmp = tmp_path_factory.mktemp("install")
    source = _checkout_copy(tmp / "checkout")
    wheels = tmp / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("queue_broker-*.whl")
    venv = tmp / "venv"
    uv = str(VENV_BIN / "uv")
    for step in (
        [uv, "venv", "-q", "--python", sys._base_executable, str(venv)],
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(wheel)],
    ):
        done = subprocess.run(
            step, capture_output=True, text=True, timeout=600, env={**_env(), "UV_NATIVE_TLS": "1"}
        )
        assert done.returncode == 0, done.stderr
    return venv / "bin"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    return {**env, "SECRET_KEY": "test-only-secret-key", "DEBUG": "False", **extra}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Somewhere that is not the checkout: the database and jobs.log land here."""
    return tmp_path


def _run(bin_dir: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "queue-broker"), *args],
        cwd=workdir, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def served(installed: Path, workdir: Path) -> Iterator[str]:
    """`queue-broker migrate`, then `queue-broker serve` on a free port: its base URL."""
    migrated = _run(installed, workdir, "migrate", "--noinput", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    assert (workdir / "db.sqlite3").is_file()  # in the working directory, not site-packages
    port = free_port()
    proc = Proc(
        [str(installed / "queue-broker"), "serve", "--workers", "1"],
        _env(BROKER_BIND=f"127.0.0.1:{port}"),
        workdir / "serve.log",
        cwd=workdir,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(base, proc), 60, 0.1, "queue-broker serve")
        yield base
    finally:
        proc.stop()


def _healthy(base: str, proc: Proc) -> bool:
    if proc.popen.poll() is not None:
        raise AssertionError(f"queue-broker serve exited:\n{proc.output()}")
    try:
        return http("GET", f"{base}/healthz", timeout=1)[0] == 200
    except OSError:
        return False


def test_installed__imports_come_from_the_venv_not_the_checkout(
    installed: Path, workdir: Path
) -> None:
    code = "import broker, workers, contract, queueproject as q; print(q.__file__)"
    shown = subprocess.run(
        [str(installed / "python"), "-c", code],
        cwd=workdir, env=_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert Path(shown.stdout.strip()).is_relative_to(installed.parent)


def test_installed__help_names_serve_and_the_management_commands(
    installed: Path, workdir: Path
) -> None:
    general = _run(installed, workdir, "help")
    assert general.returncode == 0, general.stderr
    assert "queue-broker serve --help" in general.stdout
    for command in ("runworker", "runsweeper", "migrate", "createsuperuser"):
        assert command in general.stdout
    serve_help = _run(installed, workdir, "serve", "--help")
    assert serve_help.returncode == 0 and "BROKER_BIND" in serve_help.stdout


def test_installed__serve_runs_the_api_pages_and_a_worker(
    installed: Path, workdir: Path, served: str
) -> None:
    status, body = http("POST", f"{served}/jobs", {"payload": {"line": "from the wheel"}})
    assert status == 201, body
    # Pages and their files come out of the wheel: templates and static files are package data.
    for path in ("/admin/login/", "/static/broker/dashboard.js", "/api/schema/"):
        status, _ = _get(f"{served}{path}")
        assert status == 200, path
    status, page = _get(f"{served}/", accept="text/html")  # the bundled project's own template
    assert status == 200 and b"Dashboard" in page
    worker = Proc(
        [str(installed / "queue-broker"), "runworker", "--broker", served, "--wait-ms", "200"],
        _env(),
        workdir / "worker.log",
        cwd=workdir,
    )
    try:
        log = workdir / "jobs.log"
        wait_until(lambda: log.is_file() and log.read_text(), 60, 0.1, "the worker's jobs.log")
    finally:
        worker.stop()
    line = json.loads(log.read_text().splitlines()[0])
    assert line == {"id": body["id"], "payload": {"line": "from the wheel"}}
    status, task = http("GET", f"{served}/jobs/{body['id']}")
    assert (status, task["state"]) == (200, "done")
    swept = _run(installed, workdir, "runsweeper", "--once")
    assert swept.returncode == 0, swept.stderr


def test_installed__runworker_runs_a_handler_module_of_yours(
    installed: Path, workdir: Path, served: str
) -> None:
    # The guide's module, beside nothing of the checkout: found in the working directory.
    shutil.copy(ROOT / "examples" / "handlers" / "images.py", workdir / "images.py")
    worker = Proc(
        [str(installed / "queue-broker"), "runworker", "--handlers", "images",
         "--broker", served, "--wait-ms", "200"],
        _env(),
        workdir / "worker.log",
        cwd=workdir,
    )  # fmt: skip
    try:
        wait_until(lambda: http("GET", f"{served}/types/resize_image")[0] == 200, 60, 0.1,
                   f"resize_image registered:\n{worker.output()}")  # fmt: skip
        body = {"type": "resize_image", "payload": {"path": "cat.png", "width": 400}}
        status, created = http("POST", f"{served}/jobs", body)
        assert status == 201, created

        def finished() -> dict | None:
            task = http("GET", f"{served}/jobs/{created['id']}")[1]
            return task if task["state"] in ("done", "dead") else None

        task = wait_until(finished, 60, 0.1, "the task to finish")
        # The guide's Python snippet, run by the installed interpreter.
        snippet = _guide_blocks("python")[1].replace("http://127.0.0.1:8080", served)
        enqueued = subprocess.run(
            [str(installed / "python"), "-c", snippet],
            cwd=workdir, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert enqueued.returncode == 0, enqueued.stderr
        status, second_id = enqueued.stdout.split()
        assert status == "201"
        created = {"id": second_id}
        second = wait_until(finished, 60, 0.1, "the snippet's task to finish")
    finally:
        worker.stop()
    assert (task["state"], task["result"]) == (
        "done", {"path": "cat-400.png", "width": 400, "height": 300},
    )  # fmt: skip
    assert (second["state"], second["result"]["path"]) == ("done", "dog-800.jpg")
    assert "handlers resize_image (images) and 10 built-in types" in worker.output()


def _guide_blocks(language: str) -> list[str]:
    """The code blocks of docs/your-code.md in `language`, in order."""
    text = (ROOT / "docs" / "your-code.md").read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def test_guide__its_handler_module_is_the_examples_one() -> None:
    example = (ROOT / "examples" / "handlers" / "images.py").read_text()
    module = _guide_blocks("python")[0]
    assert example.endswith(module), "docs/your-code.md's module differs from examples/handlers"


def _get(url: str, accept: str = "*/*") -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Accept": accept})  # noqa: S310 -- loopback
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 -- loopback only
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
