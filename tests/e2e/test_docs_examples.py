"""Every runnable example of README.md and docs/ runs against a real broker and does what the
page says.

A fenced block is runnable when its info string says so: ```` ```sh run ```` (bash, `set -e` and
`pipefail`) or ```` ```python run ````. A page's runnable blocks run in order against one broker
of their own (gunicorn on a free port, a fresh database), in the repository's root, with
`localhost:8080` and `127.0.0.1:8080` in them pointed at that broker and `.venv/bin` first on
PATH; each must exit 0 within 60 s, and a `curl` answered 400 or more fails it. A block may be
followed by an ```` ```json answer ```` block:
the last line the example printed must then be that JSON, where a `"..."` value stands for
anything and a list ending in `"..."` for any further items.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.procs import ROOT, VENV_BIN, child_env, gunicorn

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
_BLOCK = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.DOTALL | re.MULTILINE)
_ADDRESS = re.compile(r"(?:localhost|127\.0\.0\.1):8080")
ANY = "..."
# An answer of 400 or more fails the example as a command's failure would (curl -s exits 0).
_PROLOGUE = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n'


@dataclass
class Example:
    page: Path
    line: int
    language: str
    code: str
    answer: Any = None
    has_answer: bool = False

    def __str__(self) -> str:
        return f"{shown(self.page)}:{self.line}"


def shown(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def examples(page: Path) -> list[Example]:
    text = page.read_text()
    found: list[Example] = []
    previous_end, previous_runnable = -1, False
    for block in _BLOCK.finditer(text):
        info = block.group(1).split()
        line = text.count("\n", 0, block.start()) + 1
        runnable = info[:2] in (["sh", "run"], ["bash", "run"], ["python", "run"])
        if runnable:
            found.append(Example(page, line, info[0], block.group(2)))
        elif info[:2] == ["json", "answer"]:
            if not previous_runnable or text[previous_end : block.start()].strip():
                raise AssertionError(f"{shown(page)}:{line}: an answer follows no example")
            found[-1].answer = json.loads(block.group(2))
            found[-1].has_answer = True
        previous_end, previous_runnable = block.end(), runnable
    return found


def matches(expected: Any, actual: Any) -> bool:
    if expected == ANY:
        return True
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and matches(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return False
        if expected and expected[-1] == ANY:
            head = expected[:-1]
            return len(actual) >= len(head) and all(map(matches, head, actual))
        return len(actual) == len(expected) and all(map(matches, expected, actual))
    return bool(expected == actual and type(expected) is type(actual))


def run(example: Example, base: str, env: dict[str, str]) -> None:
    code = _ADDRESS.sub(base.removeprefix("http://"), example.code)
    if example.language == "python":
        args = [sys.executable, "-c", code]
    else:
        args = ["bash", "-c", _PROLOGUE + code]
    try:
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{example}: still running after 60 s; it printed {e.stdout!r}") from e
    told = (
        f"{example}: exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    assert done.returncode == 0, told
    if example.has_answer:
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert lines, f"{told}\nprinted nothing, the page shows {example.answer}"
        try:
            printed = json.loads(lines[-1])
        except ValueError:
            raise AssertionError(f"{told}\nthe last line is not JSON") from None
        assert matches(example.answer, printed), f"{told}\nthe page shows {example.answer}"


RUNNABLE = [page for page in PAGES if examples(page)]


@pytest.mark.e2e
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_pages_examples_run(page: Path, db_url: str, tmp_path: Path) -> None:
    with gunicorn(db_url, tmp_path, WORKERS="1") as base:
        env = child_env(db_url, BROKER_URL=base, PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for example in examples(page):
            run(example, base, env)


def test_some_pages_have_runnable_examples() -> None:
    assert ROOT / "README.md" in RUNNABLE
    assert len(RUNNABLE) >= 5


def test_matches__what_an_answer_allows() -> None:
    assert matches({"id": ANY}, {"id": "7", "x": 1})
    assert not matches({"id": ANY, "y": 1}, {"id": "7"})
    assert matches([1, ANY], [1, 2, 3])
    assert not matches([1, 2], [1, 2, 3])
    assert not matches({"n": 1}, {"n": True})
    assert not matches({"state": "done"}, {"state": "dead"})


def test_examples__an_answer_belongs_to_the_block_before_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('```sh run\necho \'{"a": 1}\'\n```\n\n```json answer\n{"a": 1}\n```\n')
    (only,) = examples(page)
    assert only.answer == {"a": 1} and only.language == "sh"
    page.write_text('Text\n\n```json answer\n{"a": 1}\n```\n')
    with pytest.raises(AssertionError, match="an answer follows no example"):
        examples(page)
