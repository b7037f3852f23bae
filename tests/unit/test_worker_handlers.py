"""Handler dispatch, the log-file handler's whole lines, the job-type registry."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from workers import handlers, jobtypes

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


def test_resolve__type_none__log_file_handler_on_given_path(tmp_path: Path) -> None:
    path = tmp_path / "out.log"

    handler = handlers.resolve(task("t1", 1), log_file=str(path))
    handler(task("t1", 1))

    assert path.read_text() == '{"id": "t1", "payload": 1}\n'


def test_resolve__unknown_type__raises_with_message() -> None:
    with pytest.raises(handlers.UnknownJobTypeError, match=r"^unknown job type: nope$"):
        handlers.resolve(task("t1", {}, "nope"))


def test_resolve__registered_type__calls_its_handler_with_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []

    class Echo:
        def handler(self, payload: Any) -> Any:
            seen.append(payload)
            return "ok"

    monkeypatch.setitem(jobtypes.REGISTRY, "echo", Echo())

    assert handlers.resolve(task("t1", {"a": 1}, "echo"))(task("t1", {"a": 1}, "echo")) == "ok"
    assert seen == [{"a": 1}]


def test_jobtypes__register__adds_and_refuses_a_second_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jobtypes, "REGISTRY", {})

    class Job:
        def handler(self, payload: Any) -> Any:
            return None

    first = Job()
    assert jobtypes.register("job", first) is first
    assert jobtypes.register("job", first) is first  # same object again: harmless
    with pytest.raises(ValueError, match="already registered"):
        jobtypes.register("job", Job())
    assert jobtypes.REGISTRY == {"job": first}
