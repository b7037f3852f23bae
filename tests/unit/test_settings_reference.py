"""docs/settings.md: its table is the one queueproject/settings_reference.py makes, and that
module names exactly the environment variables the code reads."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from queueproject.settings_reference import ENVIRONMENT, markdown_table

ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|DEBUG")
# Calls that read the environment: django-environ's env.*, os.environ.get, os.getenv, and the
# settings module's own parsers of a named variable.
# Documented, and read by another program than ours.
READ_ELSEWHERE = {"FORWARDED_ALLOW_IPS": "gunicorn"}
_READERS = re.compile(
    r"env\.\w+|os\.environ\.get|os\.getenv|_whole|_duration|_networks|seconds_from_env"
)


def read_by_the_code() -> dict[str, str]:
    """{variable: where} for every environment variable the broker, workers or project read."""
    found: dict[str, str] = {}
    for folder in ("queueproject", "broker", "workers", "contract"):
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                name = None
                if isinstance(node, ast.Call) and _READERS.fullmatch(ast.unparse(node.func)):
                    if node.args and isinstance(node.args[0], ast.Constant):
                        name = node.args[0].value
                elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
                    if isinstance(node.slice, ast.Constant):
                        name = node.slice.value
                if isinstance(name, str) and _NAME.fullmatch(name):
                    found.setdefault(name, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_docs_settings__the_table_is_the_one_the_module_makes() -> None:
    text = (ROOT / "docs" / "settings.md").read_text()
    table = re.search(r"<!-- settings:begin -->\n(.*)<!-- settings:end -->", text, re.DOTALL)
    assert table is not None
    assert table.group(1) == markdown_table()


def test_every_variable_the_code_reads_is_documented_and_no_other() -> None:
    read = read_by_the_code()
    documented = {name for setting in ENVIRONMENT for name in setting.names}
    assert {"DATABASE_URL", "BROKER_URL", "GUNICORN_THREADS", "BROKER_API_TOKENS"} <= set(read)
    missing = {name: where for name, where in read.items() if name not in documented}
    assert not missing, f"read but not in queueproject/settings_reference.py: {missing}"
    assert not documented - set(read) - set(READ_ELSEWHERE), "documented but read nowhere"


def test_whole_number_defaults_are_the_ones_contract_conf_holds() -> None:
    from contract.conf import DEFAULTS

    checked = []
    for setting in ENVIRONMENT:
        shown = setting.default.split(" / ")
        for name, text in zip(setting.names, shown, strict=False):
            value = DEFAULTS.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                assert re.search(rf"(?<![\d,]){value}(?![\d,])", text.replace(",", "")), (
                    f"{name}: documented {text!r}, contract/conf.py says {value}"
                )
                checked.append(name)
    assert "BROKER_SWEEP_INTERVAL_MS" in checked and "BROKER_RETRY_MAX_MS" in checked
