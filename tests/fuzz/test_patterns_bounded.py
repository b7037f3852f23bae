"""Every regular expression of the broker, the contract and the workers runs in time linear in
its input, whatever the input: each compiled pattern is fed long runs of the characters it names
(and whitespace, digits), after its own literal prefix, and its CPU time is held to the bound of
tests/fuzz/bounds.py. Patterns are compiled once, at module level, so that this finds them all:
a call with a pattern written in place is refused (see the last test)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from tests.fuzz.bounds import RUN_CHARS, assert_bounded

PACKAGES = ("broker", "contract", "workers")
ROOT = Path(__file__).resolve().parents[2]
RUN = 10_000
ENDS = ("!", "x", "\n", "\x00")
CALLS = ("match", "fullmatch", "search", "findall", "finditer", "sub", "split", "subn")


def _modules() -> list[str]:
    found = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if ".migrations" not in info.name:
                found.append(info.name)
    return sorted(found)


def _patterns() -> dict[str, re.Pattern[str]]:
    found: dict[str, re.Pattern[str]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                found.setdefault(f"{name}.{attr}", value)
    return found


def _literal_prefix(pattern: re.Pattern[str]) -> str:
    """The characters every match starts with (`application/` of `application/(json|...)`)."""
    prefix = []
    for op, value in re._parser.parse(pattern.pattern, pattern.flags):  # type: ignore[attr-defined]
        if op is not re._constants.LITERAL:  # type: ignore[attr-defined]
            break
        prefix.append(chr(value))
    return "".join(prefix)


def _inputs(pattern: re.Pattern[str]) -> list[str]:
    """Runs of each character the pattern names or is likely to repeat, each ended by a
    character that makes a match fail there (backtracking is what a failure costs), with and
    without the pattern's literal prefix."""
    chars = sorted({c for c in pattern.pattern if c.isprintable()} | set(RUN_CHARS))
    prefix = _literal_prefix(pattern)
    texts = []
    for run in chars:
        for end in ENDS:
            if end != run:
                texts += [run * RUN + end, prefix + run * RUN + end]
    return texts


PATTERNS = _patterns()


def test_patterns__found() -> None:
    # Would pass vacuously if the walk found nothing: the queue-name rule is always there.
    assert "contract.limits.QUEUE_RE" in PATTERNS


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern__long_runs__cpu_time_linear(name: str) -> None:
    pattern = PATTERNS[name]
    for text in _inputs(pattern):
        for use in (pattern.fullmatch, pattern.search, pattern.findall):
            assert_bounded(
                lambda use=use, text=text: use(text), len(text), f"{name} {use.__name__}"
            )


def test_no_pattern_written_in_place() -> None:
    """re.match(r"...", text) and the like, and re.compile outside a module's top level, would
    hide a pattern from the test above: refused in the broker, the contract and the workers."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            top_level = {
                id(node.value) for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
            }
            for node in ast.walk(tree):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "re"
                ):
                    continue
                if node.func.attr in CALLS or (
                    node.func.attr == "compile" and id(node) not in top_level
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} re.{node.func.attr}")
    assert not found, found
