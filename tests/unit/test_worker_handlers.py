"""Handler dispatch, the log-file handler's whole lines, the job-type registry."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from workers import handlers

ROOT = Path(__file__).resolve().parents[2]


def task(task_id: str, payload: Any, type_: str | None = None) -> dict[str, Any]:
    return {"id": task_id, "payload": payload, "type": type_}


def padded(n: int) -> dict[str, Any]:
    """Payloads from tiny to ~40 KiB, far past PIPE_BUF, so torn writes would show."""
    return {"n": n, "pad": "x" * (n % 10 * 4000)}


def lines_of(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    return [json.loads(line) for line in raw.split(b"\n")[:-1]]


def test_log_file__many_threads__every_line_whole(tmp_path: Path) -> None:
    path = tmp_path / "jobs.log"
    handler = handlers.LogFileHandler(path)
    barrier = threading.Barrier(16)

    def append(worker: int) -> None:
        barrier.wait()
        for n in range(100):
            handler(task(f"w{worker}-{n}", padded(n)))

    threads = [threading.Thread(target=append, args=(w,)) for w in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    lines = lines_of(path)
    assert sorted(line["id"] for line in lines) == sorted(
        f"w{w}-{n}" for w in range(16) for n in range(100)
    )
    assert all(line["payload"] == padded(int(line["id"].split("-")[1])) for line in lines)


CHILD = """
import sys
from workers.handlers import LogFileHandler
handler = LogFileHandler(sys.argv[1])
for n in range(int(sys.argv[3])):
    handler({"id": f"{sys.argv[2]}-{n}", "payload": {"n": n, "pad": "x" * (n % 10 * 4000)}})
"""


def test_log_file__several_processes__every_line_whole(tmp_path: Path) -> None:
    path = tmp_path / "jobs.log"
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(path), f"p{p}", "300"], cwd=ROOT)
        for p in range(4)
    ]
    assert [child.wait(60) for child in children] == [0, 0, 0, 0]

    lines = lines_of(path)
    assert sorted(line["id"] for line in lines) == sorted(
        f"p{p}-{n}" for p in range(4) for n in range(300)
    )
    assert all(line["payload"] == padded(int(line["id"].split("-")[1])) for line in lines)


def test_log_file__awkward_payloads__one_ascii_line_each(tmp_path: Path) -> None:
    path = tmp_path / "jobs.log"
    handler = handlers.LogFileHandler(path)
    payloads = [None, 3, "a\nb\u0000c", "\ud800", ["é", {"k": "☃"}], {"fail": "yes"}]

    for n, payload in enumerate(payloads):
        handler(task(f"t{n}", payload))

    assert [line["payload"] for line in lines_of(path)] == payloads


def test_log_file__fail_true__raises_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "jobs.log"

    with pytest.raises(handlers.TaskFailedError):
        handlers.LogFileHandler(path)(task("t1", {"line": "x", "fail": True}))

    assert not path.exists()


def test_dispatch__type_none__log_file_handler_on_given_path(tmp_path: Path) -> None:
    path = tmp_path / "out.log"

    handler = handlers.Dispatch(str(path))(task("t1", 1))
    handler(task("t1", 1))

    assert path.read_text() == '{"id": "t1", "payload": 1}\n'


@pytest.mark.parametrize(
    ("job_type", "message"),
    [
        ("nope", "no handler for job type 'nope' on this worker"),
        (["a"], "no handler for job type ['a'] on this worker"),  # not even a string
    ],
)
def test_dispatch__type_without_handler__raises_naming_the_type(job_type, message) -> None:
    with pytest.raises(handlers.UnknownJobTypeError) as caught:
        handlers.Dispatch()(task("t1", {}, job_type))
    assert str(caught.value) == message


def test_dispatch__registered_type__its_handler_with_the_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []

    def echo(payload: Any) -> Any:
        seen.append(payload)
        return "ok"

    monkeypatch.setitem(handlers.REGISTRY, "echo", handlers.Handler("echo", echo))

    found = handlers.Dispatch()(task("t1", {"a": 1}, "echo"))
    assert found is handlers.REGISTRY["echo"]
    assert found(task("t1", {"a": 1}, "echo")) == "ok"
    assert seen == [{"a": 1}]


def test_dispatch__builtin_type__found_without_loading_anything_first() -> None:
    code = (
        "from workers.handlers import Dispatch\n"
        "h = Dispatch()({'id': 't', 'type': 'sleep_job', 'payload': {}})\n"
        "print(h.name, h.builtin, h.where)"
    )
    shown = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, check=True)  # fmt: skip
    assert shown.stdout.split() == ["sleep_job", "True", "workers.jobtypes.sleep_job.run"]
