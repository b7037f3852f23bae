"""runworker as a real process: flags, SIGTERM/SIGINT while parked and with a task in hand."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.api_fake import ApiFake
from tests.worker_fakes import FakeServer, Reply, delivery, wait_until
from workers.management.commands import runworker

ROOT = Path(__file__).resolve().parents[2]
Spawn = Callable[..., "subprocess.Popen[bytes]"]
# The command class alone: no settings module, no database, like the worker in production.
CHILD = (
    "import sys\n"
    "from workers.management.commands.runworker import Command\n"
    "Command().run_from_argv(['manage.py', 'runworker', *sys.argv[1:]])\n"
)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """spawn(*args, cwd=ROOT, **env) starts runworker; its stderr goes to tmp_path/worker.err."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.Popen[bytes]:
        child_env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        child_env["PYTHONPATH"] = str(ROOT)  # the command's code; the cwd may be elsewhere
        child_env.update(env)
        with open(tmp_path / "worker.err", "ab") as err:
            proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, *args],
                cwd=cwd,
                env=child_env,
                stdout=err,
                stderr=err,
            )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def stderr_of(tmp_path: Path) -> str:
    return (tmp_path / "worker.err").read_text(errors="replace")


def test_runworker__flags__defaults_from_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BROKER_URL", raising=False)
    parser = runworker.Command().create_parser("manage.py", "runworker")

    options = parser.parse_args([])

    assert (options.broker, options.log_file, options.concurrency) == (
        "http://127.0.0.1:8080",
        "./jobs.log",
        3,
    )
    assert (options.wait_ms, options.lease_ms, options.queue) == (20000, 30000, [])


def test_runworker__broker_url_env__is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROKER_URL", "http://broker:9000")

    options = runworker.Command().create_parser("manage.py", "runworker").parse_args([])

    assert options.broker == "http://broker:9000"


def test_runworker__no_checks_no_database() -> None:
    command = runworker.Command()

    assert command.requires_system_checks == []
    assert command.requires_migrations_checks is False


def test_runworker__mode_flags__prefetch_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = runworker.Command().create_parser("manage.py", "runworker")

    assert (parser.parse_args([]).prefetch, parser.parse_args([]).batch) == (None, 1)
    assert parser.parse_args(["--prefetch", "0"]).prefetch == 0


def test_runworker__batch_and_prefetch__usage_error() -> None:
    with pytest.raises(CommandError, match="two modes"):
        call_command(runworker.Command(), "--batch", "5", "--prefetch", "2", stdout=io.StringIO())


# (extra flags, claim request, claims parked by an idle worker of 3 threads)
MODES = {
    "prefetch": ((), ("POST", "/jobs/claim"), 1),
    "single": (("--prefetch", "0"), ("GET", "/jobs/next"), 3),
    "batch": (("--batch", "5"), ("POST", "/jobs/claim"), 3),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_runworker__signal_while_parked__exits_0_at_once(
    http_broker: FakeServer, spawn: Spawn, tmp_path: Path, signum: int, mode: str
) -> None:
    flags, (method, path), parked = MODES[mode]
    http_broker.default(method, path, Reply(204, hold_s=20))
    proc = spawn(
        "--broker",
        http_broker.url,
        "--wait-ms",
        "20000",
        "--concurrency",
        "3",
        "--log-file",
        str(tmp_path / "jobs.log"),
        *flags,
    )
    assert wait_until(lambda: len(http_broker.requests_to(method, path)) == parked, 20)
    time.sleep(0.2)  # parked in recv()

    sent_at = time.monotonic()
    proc.send_signal(signum)
    code = proc.wait(10)

    assert code == 0, stderr_of(tmp_path)
    assert time.monotonic() - sent_at < 3
    assert len(http_broker.requests_to(method, path)) == parked


def read_line(fifo: Path, timeout_s: float, lines: int = 1) -> bytes:
    """Open the FIFO's read end (freeing the writers) and read that many lines from it."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    data = b""
    try:
        end = time.monotonic() + timeout_s
        while data.count(b"\n") < lines and time.monotonic() < end:
            try:
                data += os.read(fd, 65536)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise
            time.sleep(0.01)
    finally:
        os.close(fd)
    return data


def test_runworker__sigterm_with_task_in_hand__finishes_acks_exits_0(
    http_broker: FakeServer, spawn: Spawn, tmp_path: Path
) -> None:
    # The log file is a FIFO: the handler blocks opening it until the test reads, which
    # keeps the task in hand for as long as the test wants.
    fifo = tmp_path / "jobs.fifo"
    os.mkfifo(fifo)
    http_broker.script("GET", "/jobs/next", Reply(200, delivery("t1", {"line": "hello 1"})))
    http_broker.default("GET", "/jobs/next", Reply(204, hold_s=20))
    http_broker.default("POST", "/jobs/t1/ack", Reply(204))
    proc = spawn(
        "--broker",
        http_broker.url,
        "--concurrency",
        "1",
        "--log-file",
        str(fifo),
        "--prefetch",
        "0",
        BROKER_API_TOKEN="tok",
    )
    assert wait_until(lambda: len(http_broker.requests_to("GET", "/jobs/next")) == 1, 20)
    time.sleep(0.3)  # the handler is now blocked opening the FIFO

    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert proc.poll() is None  # still finishing the task in hand
    line = read_line(fifo, 5)
    code = proc.wait(10)

    assert code == 0, stderr_of(tmp_path)
    assert json.loads(line) == {"id": "t1", "payload": {"line": "hello 1"}}
    (ack,) = http_broker.requests_to("POST", "/jobs/t1/ack")
    assert ack.query == {"lease_id": ["lease-t1"]}
    assert ack.headers["authorization"] == "Bearer tok"
    assert ack.headers["x-broker-worker"] == f"{socket.gethostname()}:{proc.pid}:worker-1"
    assert len(http_broker.requests_to("GET", "/jobs/next")) == 1  # no claim after SIGTERM
    assert "task t1 acked" in stderr_of(tmp_path)


def test_runworker__sigterm_with_tasks_prefetched__runs_settles_all_exits_0(
    http_broker: FakeServer, spawn: Spawn, tmp_path: Path
) -> None:
    fifo = tmp_path / "jobs.fifo"
    os.mkfifo(fifo)
    api = ApiFake(http_broker)
    for n in (1, 2, 3, 4):
        api.add(f"t{n}", {"line": f"hello {n}"})
    proc = spawn(
        "--broker",
        http_broker.url,
        "--concurrency",
        "1",
        "--prefetch",
        "3",
        "--log-file",
        str(fifo),
    )
    # t1 runs, blocked on the FIFO; t2 waits its turn (one per thread until tasks are timed).
    assert wait_until(lambda: set(api.held) == {"t1", "t2"}, 20)
    time.sleep(0.3)
    claims = len(api.claim_bodies)

    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert proc.poll() is None  # still working through what it holds
    lines = read_line(fifo, 5, lines=2).splitlines()
    code = proc.wait(10)

    assert code == 0, stderr_of(tmp_path)
    assert [json.loads(line)["id"] for line in lines] == ["t1", "t2"]
    assert api.acked == {"t1": None, "t2": None}
    assert [d["task"]["id"] for d in api.pending] == ["t3", "t4"]
    assert len(api.claim_bodies) == claims  # no claim after SIGTERM
    assert "task t2 acked" in stderr_of(tmp_path)


# -- handlers of your own ---------------------------------------------------------------------

SHOP_JOBS = '''
from workers import handler


@handler("resize_image", schema={"type": "object", "required": ["width"]})
def resize(payload):
    """Resize one image."""
    return {"width": payload["width"] // 2}
'''


def _module(tmp_path: Path, name: str, source: str) -> Path:
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(source)
    return folder


def test_runworker__handlers__types_registered_then_their_tasks_run(
    http_broker: FakeServer, spawn: Spawn, tmp_path: Path
) -> None:
    folder = _module(tmp_path, "shop_jobs", SHOP_JOBS)
    http_broker.default("PUT", "/types/resize_image", Reply(201, {"name": "resize_image"}))
    api = ApiFake(http_broker)
    api.add("t1", {"width": 8}, type_="resize_image")
    proc = spawn("--broker", http_broker.url, "--handlers", "shop_jobs", cwd=folder)

    assert wait_until(lambda: api.acked == {"t1": {"width": 4}}, 20), stderr_of(tmp_path)
    (put,) = http_broker.requests_to("PUT", "/types/resize_image")
    assert put.body == {
        "schema": {"type": "object", "required": ["width"]},
        "description": "Resize one image.",
    }
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    shown = stderr_of(tmp_path)
    assert "job type resize_image registered" in shown
    assert "handlers resize_image (shop_jobs) and 10 built-in types" in shown


def test_runworker__handlers_from_the_environment__as_the_flag(
    http_broker: FakeServer, spawn: Spawn, tmp_path: Path
) -> None:
    folder = _module(tmp_path, "shop_jobs", SHOP_JOBS)
    api = ApiFake(http_broker)
    api.add("t1", {"width": 8}, type_="resize_image")
    spawn("--broker", http_broker.url, "--no-register", cwd=folder,
          BROKER_WORKER_HANDLERS="shop_jobs")  # fmt: skip

    assert wait_until(lambda: api.acked == {"t1": {"width": 4}}, 20), stderr_of(tmp_path)
    assert http_broker.requests_to("PUT", "/types/resize_image") == []  # --no-register


def test_runworker__registration_refused__logged_and_the_worker_goes_on(
    http_broker: FakeServer, spawn: Spawn, tmp_path: Path
) -> None:
    folder = _module(tmp_path, "shop_jobs", SHOP_JOBS)
    refusal = {"error": "This token may not manage job types."}
    http_broker.default("PUT", "/types/resize_image", Reply(403, refusal))
    api = ApiFake(http_broker)
    api.add("t1", {"width": 8}, type_="resize_image")
    spawn("--broker", http_broker.url, "--handlers", "shop_jobs", cwd=folder)

    assert wait_until(lambda: api.acked == {"t1": {"width": 4}}, 20), stderr_of(tmp_path)
    assert (
        "job type resize_image not registered: the broker answered 403 (This token may not "
        "manage job types.); going on" in stderr_of(tmp_path)
    )


@pytest.mark.parametrize(
    ("files", "handlers", "message"),
    [
        ({}, "not_here", "handler module not_here failed to import: ModuleNotFoundError: No "
                         "module named 'not_here' (looked for in "),
        ({"bad_jobs": "import numpyy\n"}, "bad_jobs",
         "handler module bad_jobs failed to import: ModuleNotFoundError: No module named "
         "'numpyy'"),
        ({"one": SHOP_JOBS, "two": SHOP_JOBS.replace("def resize", "def resize_again")},
         "one,two", "handler module two: two handlers for job type 'resize_image': "
                    "one.resize and two.resize_again"),
        ({"mine": "from workers import handler\n@handler('sleep_job')\ndef f(payload): pass\n"},
         "mine", "handler module mine: mine.f: 'sleep_job' is a built-in job type's name"),
    ],
)  # fmt: skip
def test_runworker__handlers_that_cannot_be_used__exit_1_naming_the_cause(
    http_broker: FakeServer,
    spawn: Spawn,
    tmp_path: Path,
    files: dict[str, str],
    handlers: str,
    message: str,
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    for name, source in files.items():
        _module(tmp_path, name, source)
    proc = spawn("--broker", http_broker.url, "--handlers", handlers, cwd=folder)

    assert proc.wait(20) == 1
    assert f"CommandError: {message}" in stderr_of(tmp_path)
    assert http_broker.seen == []  # stopped before any claim or registration


def test_runworker__handlers_not_module_names__usage_error(spawn: Spawn, tmp_path: Path) -> None:
    proc = spawn("--handlers", "shop-jobs")

    assert proc.wait(20) == 2
    assert "argument --handlers: not a module name: 'shop-jobs'" in stderr_of(tmp_path)
