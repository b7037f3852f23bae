"""Two houses, one contract: broker/ and workers/ never import each other; contract/ neither."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package → the top-level packages its modules must never import
FORBIDDEN = {
    "broker": {"workers"},
    "workers": {"broker"},
    "contract": {"broker", "workers"},
}


def package_of(path: Path) -> str:
    """The dotted package a module file belongs to: what its relative imports start from."""
    return ".".join(path.relative_to(ROOT).parent.parts)


def imported(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in the file, those inside functions included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.append((node.lineno, ".".join([*base, *filter(None, [node.module])])))
            else:
                found.append((node.lineno, node.module or ""))
    return found


def crossings(package: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, name in imported(path, package_of(path)):
            if name.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports__no_crossing_between_the_houses(package: str) -> None:
    assert crossings(package) == []


def test_imports__the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "import os\n"
        "def f():\n"
        "    from workers.jobtypes import REGISTRY\n"
        "    import broker.queue as q\n"
        "    from ..broker import api\n"
    )
    names = [name for _, name in imported(source, "contract.sub") if name != "os"]
    assert names == ["workers.jobtypes", "broker.queue", "contract.broker"]
