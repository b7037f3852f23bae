"""deploy/systemd: each unit's commands are queue-broker commands with options they accept."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))


def commands(unit: Path) -> list[list[str]]:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(unit)
    service = parser["Service"]
    lines = [service[key] for key in ("ExecStartPre", "ExecStart") if key in service]
    return [shlex.split(line.replace("%i", "mail,sms")) for line in lines]


def test_the_units_are_there() -> None:
    names = {unit.name for unit in UNITS}
    assert {"queue-broker.service", "queue-broker-sweeper.service"} <= names
    assert "queue-broker-worker@.service" in names


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_command_parses(unit: Path) -> None:
    for args in commands(unit):
        assert Path(args[0]).name == "queue-broker", args
        name, options = args[1], args[2:]
        if name == "serve":
            assert options == []
            continue
        command = load_command_class(get_commands()[name], name)
        command.create_parser("queue-broker", name).parse_args(options)  # exits 2 when refused
