"""The registries find one module per type: a contract spec, and its handler in workers/."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path

import pytest

from contract.jobtypes import SPECS, JobSpec
from tests.conftest import SAMPLE_TYPES
from tests.procs import python
from workers import jobtypes
from workers.jobtypes import JobType, Registry

NEW_TYPE = '''
"""echo_job: a type added by one new module."""
from contract.fields import PayloadSchema, StrictString
from contract.jobtypes import JobSpec
from workers.jobtypes import JobType


class EchoPayload(PayloadSchema):
    text = StrictString()


JOB_TYPE = JobType(JobSpec(name="echo_job", schema=EchoPayload), lambda p: p["text"] * 2)
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


def test_registry__holds_every_sample_type_under_its_module_name() -> None:
    assert set(SAMPLE_TYPES) <= set(jobtypes.REGISTRY)
    for name in SAMPLE_TYPES:
        jobtype = jobtypes.REGISTRY[name]
        assert isinstance(jobtype, JobType)
        assert jobtype.name == name
        assert sys.modules[f"workers.jobtypes.{name}"].JOB_TYPE is jobtype


def test_registry__every_public_module_of_the_package_is_registered() -> None:
    path = Path(jobtypes.__file__).parent
    modules = {p.stem for p in path.glob("*.py") if not p.stem.startswith("_")}
    registered = set(jobtypes.REGISTRY)  # first use: imports every module
    declared = {sys.modules[f"workers.jobtypes.{m}"].JOB_TYPE.name for m in modules}
    assert declared == modules
    assert declared <= registered


def test_registry__new_module__registered_with_no_other_edit(on_path: Path) -> None:
    name, path = package(on_path, "extra_types_a", {"echo_job": NEW_TYPE})
    registry = Registry(name, path)
    assert list(registry) == ["echo_job"]
    assert registry["echo_job"].handler({"text": "ab"}) == "abab"
    assert registry["echo_job"].spec.validate({"text": 1}) == {"text": ["Not a valid string."]}


def test_registry__modules_load_on_first_use_not_on_import(on_path: Path) -> None:
    name, path = package(on_path, "extra_types_b", {"echo_job": NEW_TYPE})
    registry = Registry(name, path)
    assert f"{name}.echo_job" not in sys.modules
    assert "echo_job" in registry
    assert f"{name}.echo_job" in sys.modules


def test_registry__underscore_modules_are_helpers_not_types(on_path: Path) -> None:
    name, path = package(on_path, "extra_types_c", {"_helpers": "X = 1\n", "echo_job": NEW_TYPE})
    assert list(Registry(name, path)) == ["echo_job"]


def test_registry__module_without_job_type__typeerror_naming_it(on_path: Path) -> None:
    name, path = package(on_path, "extra_types_d", {"half_done": "x = 1\n"})
    with pytest.raises(TypeError, match=r"extra_types_d\.half_done must define JOB_TYPE"):
        list(Registry(name, path))


def test_registry__two_modules_one_name__valueerror(on_path: Path) -> None:
    name, path = package(on_path, "extra_types_e", {"echo_job": NEW_TYPE, "echo_two": NEW_TYPE})
    with pytest.raises(ValueError, match="already registered: echo_job"):
        list(Registry(name, path))


@pytest.mark.parametrize("package", ["workers.jobtypes", "contract.jobtypes"])
def test_registry__importing_the_package_imports_no_type_module(package: str) -> None:
    # A fresh interpreter: importing the registry must not pull in the type modules (nor DRF).
    code = (
        f"import sys, {package}; "
        "print(sorted(m for m in sys.modules if m.startswith(('workers.jobtypes.', "
        "'contract.jobtypes.', 'rest_framework'))))"
    )
    out = python(code)
    assert out.stdout.strip() == "[]"


def test_contract__every_spec_has_its_handler_and_every_handler_its_spec() -> None:
    assert set(SPECS) == set(jobtypes.REGISTRY)
    for name, spec in SPECS.items():
        assert isinstance(spec, JobSpec)
        assert sys.modules[f"contract.jobtypes.{name}"].SPEC is spec
        assert jobtypes.REGISTRY[name].spec is spec  # the worker validates with the broker's rules


def test_spec__schema_not_strict__typeerror() -> None:
    from rest_framework import serializers

    class Loose(serializers.Serializer):
        text = serializers.CharField()

    with pytest.raises(TypeError, match=r"must be a contract\.fields\.PayloadSchema"):
        JobSpec(name="loose", schema=Loose)


def test_register__adds_under_the_name_given() -> None:
    class Job:
        def handler(self, payload: object) -> object:
            return payload

    job = Job()
    try:
        assert jobtypes.register("registry_test_job", job) is job
        assert jobtypes.REGISTRY["registry_test_job"] is job
        with pytest.raises(ValueError, match="already registered"):
            jobtypes.register("sleep_job", job)
    finally:
        del jobtypes.REGISTRY["registry_test_job"]


def test_registry__type_module_using_registry_at_import__clear_error(on_path: Path) -> None:
    package(
        on_path,
        "extra_types_f",
        {"loops": "from extra_types_f import REG\nREG.get('x')\n"},
        init="from workers.jobtypes import Registry\nREG = Registry(__name__, __path__)\n",
    )
    import extra_types_f

    with pytest.raises(RuntimeError, match="must not use REGISTRY at import time"):
        list(extra_types_f.REG)


def test_registry__concurrent_first_use__each_module_imported_once(on_path: Path) -> None:
    name, path = package(
        on_path,
        "extra_types_g",
        {"echo_job": NEW_TYPE + "import extra_types_g\nextra_types_g.IMPORTS.append(1)\n"},
        init="IMPORTS = []\n",
    )
    import extra_types_g

    registry = Registry(name, path)
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
    assert extra_types_g.IMPORTS == [1]
