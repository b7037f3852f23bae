"""The built-in job types: a contract spec per type (contract/jobtypes, found by its registry) and
a handler per type declared with @handler (workers/jobtypes), one module each, named after it."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path

import pytest

from contract.jobtypes import SPECS, JobSpec, SpecRegistry
from tests.conftest import SAMPLE_TYPES
from tests.procs import python
from workers import handlers, jobtypes

NEW_SPEC = '''
"""echo_job: a type added by one new module."""
from contract.fields import PayloadSchema, StrictString
from contract.jobtypes import JobSpec


class EchoPayload(PayloadSchema):
    text = StrictString()


SPEC = JobSpec(name="echo_job", schema=EchoPayload)
'''


def package(
    tmp_path: Path, name: str, modules: dict[str, str], init: str = ""
) -> tuple[str, list[str]]:
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text(init)
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    return name, [str(root)]


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_builtins__every_sample_type_a_handler_declared_in_its_module() -> None:
    assert handlers.load_builtins() == {}
    assert set(SAMPLE_TYPES) <= set(jobtypes.NAMES)
    for name in SAMPLE_TYPES:
        found = handlers.REGISTRY[name]
        assert isinstance(found, handlers.Handler)
        assert (found.name, found.builtin, found.where) == (
            name, True, f"workers.jobtypes.{name}.run"
        )  # fmt: skip


def test_builtins__names_are_the_public_modules_of_the_package() -> None:
    path = Path(jobtypes.__file__).parent
    modules = {p.stem for p in path.glob("*.py") if not p.stem.startswith("_")}
    assert set(jobtypes.NAMES) == modules
    handlers.load_builtins()
    assert {h.name for h in handlers.REGISTRY.values() if h.builtin} == modules


def test_contract__every_spec_has_its_handler_and_every_handler_its_spec() -> None:
    handlers.load_builtins()
    assert set(SPECS) == set(jobtypes.NAMES)
    for name, spec in SPECS.items():
        assert isinstance(spec, JobSpec)
        assert sys.modules[f"contract.jobtypes.{name}"].SPEC is spec
        found = handlers.REGISTRY[name]
        assert found.description == spec.description
        assert found._check == spec.check  # the broker's rules, defaults filled in


def test_spec_registry__new_module__registered_with_no_other_edit(on_path: Path) -> None:
    name, path = package(on_path, "extra_specs_a", {"echo_job": NEW_SPEC})
    registry = SpecRegistry(name, path)
    assert list(registry) == ["echo_job"]
    assert registry["echo_job"].validate({"text": 1}) == {"text": ["Not a valid string."]}


def test_spec_registry__modules_load_on_first_use_not_on_import(on_path: Path) -> None:
    name, path = package(on_path, "extra_specs_b", {"echo_job": NEW_SPEC})
    registry = SpecRegistry(name, path)
    assert f"{name}.echo_job" not in sys.modules
    assert "echo_job" in registry
    assert f"{name}.echo_job" in sys.modules


def test_spec_registry__underscore_modules_are_helpers_not_types(on_path: Path) -> None:
    name, path = package(on_path, "extra_specs_c", {"_helpers": "X = 1\n", "echo_job": NEW_SPEC})
    assert list(SpecRegistry(name, path)) == ["echo_job"]


def test_spec_registry__module_without_spec__typeerror_naming_it(on_path: Path) -> None:
    name, path = package(on_path, "extra_specs_d", {"half_done": "x = 1\n"})
    with pytest.raises(TypeError, match=r"extra_specs_d\.half_done must define SPEC"):
        list(SpecRegistry(name, path))


def test_spec_registry__two_modules_one_name__valueerror(on_path: Path) -> None:
    name, path = package(on_path, "extra_specs_e", {"echo_job": NEW_SPEC, "echo_two": NEW_SPEC})
    with pytest.raises(ValueError, match="already registered: echo_job"):
        list(SpecRegistry(name, path))


@pytest.mark.parametrize("package", ["workers", "workers.jobtypes", "contract.jobtypes"])
def test_registry__importing_the_package_imports_no_type_module(package: str) -> None:
    # A fresh interpreter: `from workers import handler` in a module of yours stays cheap.
    code = (
        f"import sys, {package}; "
        "print(sorted(m for m in sys.modules if m.startswith(('workers.jobtypes.', "
        "'contract.jobtypes.', 'rest_framework', 'jsonschema'))))"
    )
    out = python(code)
    assert out.stdout.strip() == "[]"


def test_spec__schema_not_strict__typeerror() -> None:
    from rest_framework import serializers

    class Loose(serializers.Serializer):
        text = serializers.CharField()

    with pytest.raises(TypeError, match=r"must be a contract\.fields\.PayloadSchema"):
        JobSpec(name="loose", schema=Loose)


def test_spec_registry__type_module_using_it_at_import__clear_error(on_path: Path) -> None:
    package(
        on_path,
        "extra_specs_f",
        {"loops": "from extra_specs_f import REG\nREG.get('x')\n"},
        init="from contract.jobtypes import SpecRegistry\nREG = SpecRegistry(__name__, __path__)\n",
    )
    import extra_specs_f

    with pytest.raises(RuntimeError, match="must not use REGISTRY at import time"):
        list(extra_specs_f.REG)


def test_spec_registry__concurrent_first_use__each_module_imported_once(on_path: Path) -> None:
    name, path = package(
        on_path,
        "extra_specs_g",
        {"echo_job": NEW_SPEC + "import extra_specs_g\nextra_specs_g.IMPORTS.append(1)\n"},
        init="IMPORTS = []\n",
    )
    import extra_specs_g

    registry = SpecRegistry(name, path)
    start = threading.Barrier(8)
    seen: list[list[str]] = []

    def use() -> None:
        start.wait(10)
        seen.append(list(registry))

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [["echo_job"]] * 8
    assert extra_specs_g.IMPORTS == [1]
