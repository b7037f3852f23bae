"""pyproject.toml's explicit package list holds every package of the four the wheel carries."""

from __future__ import annotations

import tomllib

from tests.procs import ROOT

ROOTS = ("broker", "workers", "contract", "queueproject")


def test_pyproject__lists_every_package_of_the_four_roots() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for root in ROOTS
        for init in (ROOT / root).rglob("__init__.py")
    }
    # Data-only folders (templates, static) ride as package data, not as packages.
    assert found <= listed, f"add to pyproject.toml's packages: {sorted(found - listed)}"
    assert listed - found == {"queueproject.templates"}  # templates/, mapped by package-dir


def test_pyproject__console_script_and_dependencies_from_requirements() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"queue-broker": "queueproject.cli:main"}
    dynamic = project["tool"]["setuptools"]["dynamic"]["dependencies"]
    assert dynamic == {"file": ["requirements.txt"]}
