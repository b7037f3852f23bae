"""`from workers import handler`: declaring handlers, the checks made when they are declared, the
payload checked before the function runs, and runworker's start-up loading of modules."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contract.jobtypes import InvalidPayloadError
from tests.procs import python
from workers import handler, handlers, loading
from workers.job import Job

SCHEMA = {"type": "object", "required": ["width"], "properties": {"width": {"type": "integer"}}}


@pytest.fixture(autouse=True)
def declared() -> Iterator[None]:
    """What a test declares is gone after it (the built-ins stay)."""
    handlers.load_builtins()
    before = dict(handlers.REGISTRY)
    yield
    dict.clear(handlers.REGISTRY)
    dict.update(handlers.REGISTRY, before)


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path for handler modules written by the test (forgotten afterwards)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("h_")]:
        del sys.modules[name]


def write(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))


# -- declaring ------------------------------------------------------------------------------------


def test_handler__declares_and_returns_the_function_unchanged() -> None:
    def resize(payload: dict) -> dict:
        """Resize one image.

        More words, not part of the description.
        """
        return {"width": payload["width"] // 2}

    assert handler("resize_image", schema=SCHEMA)(resize) is resize
    found = handlers.REGISTRY["resize_image"]
    assert (found.name, found.function, found.schema) == ("resize_image", resize, SCHEMA)
    assert (found.description, found.with_job, found.builtin) == ("Resize one image.", False, False)
    local = "test_handler__declares_and_returns_the_function_unchanged.<locals>"
    assert found.where == f"{__name__}.{local}.resize"
    assert found({"id": "1", "payload": {"width": 8}}) == {"width": 4}
    assert handlers.yours() == [found]


def test_handler__payload_refused_by_its_schema__invalid_payload_naming_the_place() -> None:
    ran: list[Any] = []
    handler("resize_image", schema=SCHEMA)(ran.append)
    with pytest.raises(InvalidPayloadError) as caught:
        handlers.REGISTRY["resize_image"].run({"width": "8"})
    assert str(caught.value) == "invalid resize_image payload: width: '8' is not of type 'integer'"
    with pytest.raises(InvalidPayloadError, match=r"payload: \[\] is not of type 'object'"):
        handlers.REGISTRY["resize_image"].run([])
    assert ran == []


def test_handler__no_schema__any_payload_as_sent() -> None:
    seen: list[Any] = []

    @handler("anything")
    def anything(payload: Any) -> None:
        seen.append(payload)

    for payload in (None, 1, [1], {"a": {}}):
        handlers.REGISTRY["anything"].run(payload)
    assert seen == [None, 1, [1], {"a": {}}]
    assert handlers.REGISTRY["anything"].description == ""


def test_handler__of_payload_and_job__gets_the_job() -> None:
    @handler("with_job")
    def run(payload: Any, job: Job) -> Any:
        job.progress(0.5, "half")
        return [payload, job.id, job.attempts]

    found = handlers.REGISTRY["with_job"]
    assert found.with_job is True
    job = Job({"task": {"id": "7", "payload": 3, "attempts": 2}, "lease_id": "l", "deadline": ""})
    assert found(job) == [3, "7", 2]
    assert job.last_report == {"fraction": 0.5, "message": "half"}
    assert found.run(4) == [4, "", 1]  # called directly: a bare job, reporting nowhere


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Resize", "job type name 'Resize': Must match [a-z][a-z0-9_.-]{0,63}."),
        ("a" * 65, "Must match"),
        ("", "job type name '': Must match"),
        (5, "job type name 5: Must match"),
    ],
)
def test_handler__bad_name__error_naming_function_and_rule(name: Any, message: str) -> None:
    def f(payload: Any) -> None: ...

    with pytest.raises(handlers.HandlerDeclarationError, match=re.escape(message)) as caught:
        handler(name)(f)
    assert str(caught.value).startswith(f"{__name__}.")


def test_handler__without_a_name__error_saying_how() -> None:
    def resize(payload: Any) -> None: ...

    with pytest.raises(handlers.HandlerDeclarationError, match=r'@handler\("my_type"\)'):
        handler(resize)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "integr"}, "its schema: Not a valid JSON Schema (draft 2020-12) (at type)"),
        ({"$ref": "https://example.com/s.json"}, "points outside the schema"),
        ({"minimum": float("nan")}, "its schema is not JSON"),
        ({"default": {1, 2}}, "its schema is not JSON"),
    ],
)
def test_handler__bad_schema__error_at_declaration(schema: Any, message: str) -> None:
    def f(payload: Any) -> None: ...

    with pytest.raises(handlers.HandlerDeclarationError, match=re.escape(message)):
        handler("t", schema=schema)(f)
    assert "t" not in dict(handlers.REGISTRY)


@pytest.mark.parametrize("signature", ["()", "(a, b, c)", "(*, payload)", "(payload, *, key)"])
def test_handler__neither_payload_nor_payload_and_job__error(signature: str) -> None:
    scope: dict[str, Any] = {}
    exec(f"def f{signature}: pass", scope)  # noqa: S102 -- a signature under test
    expected = re.escape("takes (payload) or (payload, job)")
    with pytest.raises(handlers.HandlerDeclarationError, match=expected):
        handler("t")(scope["f"])


@pytest.mark.parametrize(
    "signature",
    ["(payload)", "(payload, job)", "(payload, job=None)", "(*args)", "(payload, /)",
     "(payload, job, extra=1)", "(payload, *, key=2)"],
)  # fmt: skip
def test_handler__accepted_signatures(signature: str) -> None:
    scope: dict[str, Any] = {}
    exec(f"def f{signature}: return 1", scope)  # noqa: S102 -- a signature under test
    handler("t")(scope["f"])
    assert handlers.REGISTRY["t"].run({}) == 1


def test_handler__builtin_types_name__error() -> None:
    def sleep(payload: Any) -> None: ...

    with pytest.raises(handlers.HandlerDeclarationError) as caught:
        handler("sleep_job")(sleep)
    assert str(caught.value) == (
        f"{__name__}.test_handler__builtin_types_name__error.<locals>.sleep: 'sleep_job' is a "
        "built-in job type's name; choose another"
    )
    assert handlers.REGISTRY["sleep_job"].builtin


def test_handler__two_for_one_name__error_naming_both() -> None:
    def first(payload: Any) -> None: ...

    def second(payload: Any) -> None: ...

    handler("t")(first)
    with pytest.raises(handlers.HandlerDeclarationError) as caught:
        handler("t")(second)
    local = f"{__name__}.test_handler__two_for_one_name__error_naming_both.<locals>"
    assert str(caught.value) == f"two handlers for job type 't': {local}.first and {local}.second"
    assert handlers.REGISTRY["t"].function is first


def test_handler__the_same_function_declared_again__no_error(modules: Path) -> None:
    source = "from workers import handler\n@handler('t')\ndef f(payload): return 1\n"
    write(modules, "h_again", source)
    import importlib

    importlib.reload(importlib.import_module("h_again"))  # the module run twice: one handler
    assert handlers.REGISTRY["t"].run(None) == 1


# -- the built-in types, loaded one by one ------------------------------------------------------


def test_builtins__one_module_that_cannot_import__the_others_run_and_its_tasks_say_why() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["workers.jobtypes.image_resize"] = None  # as a library missing on this host
        from workers import handlers
        dispatch = handlers.Dispatch()
        print(handlers.load_builtins())
        sleep = dispatch({"id": "1", "type": "sleep_job", "payload": {"duration_seconds": 0}})
        print(sleep({"id": "1", "payload": {"duration_seconds": 0}}))
        try:
            dispatch({"id": "2", "type": "image_resize", "payload": {}})
        except handlers.UnknownJobTypeError as exc:
            print(exc)
    """)
    lines = python(code).stdout.splitlines()
    why = "ModuleNotFoundError: import of workers.jobtypes.image_resize halted; None in sys.modules"
    assert lines == [
        f"{{'image_resize': '{why}'}}",
        "{'slept_seconds': 0.0}",
        f"no handler for job type 'image_resize' on this worker: its module failed to import "
        f"({why})",
    ]


# -- runworker's start: loading modules -----------------------------------------------------------


def test_load__modules_imported_and_their_handlers_listed(modules: Path) -> None:
    write(
        modules,
        "h_images",
        """
        from workers import handler

        @handler("resize_image", schema={"type": "object"})
        def resize(payload):
            '''Resize one image.'''
            return 1

        @handler("thumbnail")
        def thumb(payload, job):
            return 2
    """,
    )
    loaded = loading.load(["h_images"])
    assert loaded.modules == {"h_images": ["resize_image", "thumbnail"]}
    assert [h.name for h in loaded.yours] == ["resize_image", "thumbnail"]
    assert loaded.builtin_failed == {}


def test_load__from_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "h_cwd", "from workers import handler\n@handler('t')\ndef f(payload): pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert loading.load(["h_cwd"]).modules == {"h_cwd": ["t"]}
        assert sys.path[0] == str(tmp_path)
    finally:
        sys.modules.pop("h_cwd", None)


@pytest.mark.parametrize(
    ("files", "module", "message"),
    [
        ({}, "h_missing", "handler module h_missing failed to import: ModuleNotFoundError: "
                          "No module named 'h_missing' (looked for in "),
        ({"h_imports": "import h_not_there\n"}, "h_imports",
         "handler module h_imports failed to import: ModuleNotFoundError: No module named "
         "'h_not_there'"),
        ({"h_raises": "x = 1\nraise RuntimeError('no config')\n"}, "h_raises",
         "handler module h_raises failed to import: RuntimeError: no config (at "),
        ({"h_syntax": "def f(:\n"}, "h_syntax",
         "handler module h_syntax failed to import: "),
        ({"h_builtin": "from workers import handler\n@handler('sleep_job')\ndef f(p): pass\n"},
         "h_builtin", "handler module h_builtin: h_builtin.f: 'sleep_job' is a built-in job "
                      "type's name; choose another"),
        ({"h_a": "from workers import handler\n@handler('t')\ndef f(p): pass\n",
          "h_b": "import h_a\nfrom workers import handler\n@handler('t')\ndef g(p): pass\n"},
         "h_b", "handler module h_b: two handlers for job type 't': h_a.f and h_b.g"),
    ],
)  # fmt: skip
def test_load__module_that_cannot_be_used__startup_error_naming_the_cause(
    modules: Path, files: dict[str, str], module: str, message: str
) -> None:
    for name, source in files.items():
        write(modules, name, source)
    with pytest.raises(loading.StartupError) as caught:
        loading.load([module])
    assert str(caught.value).startswith(message), str(caught.value)


def test_load__syntax_error__names_the_file_and_line(modules: Path) -> None:
    write(modules, "h_syntax2", "x = 1\ndef f(:\n")
    with pytest.raises(loading.StartupError) as caught:
        loading.load(["h_syntax2"])
    assert "h_syntax2.py" in str(caught.value) and "line 2" in str(caught.value)
    assert "SyntaxError" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("a.b,c", ["a.b", "c"]),
        (" a , ,a,b ", ["a", "b"]),
        (["a,b", "c"], ["a", "b", "c"]),
        ("", []),
    ],
)
def test_module_names__comma_separated_once_each(text: Any, names: list[str]) -> None:
    assert loading.module_names(text) == names


@pytest.mark.parametrize("text", ["a-b", "a..b", "1a", "a/b", "a.b."])
def test_module_names__not_a_module_name__valueerror(text: str) -> None:
    with pytest.raises(ValueError, match="not a module name"):
        loading.module_names(text)


def test_examples_handlers__the_guides_module_declares_its_types() -> None:
    out = python(
        "import sys; sys.path.insert(0, 'examples/handlers')\n"
        "from workers import loading\n"
        "loaded = loading.load(['images'])\n"
        "print([(h.name, h.description) for h in loaded.yours])"
    )
    assert out.stdout.strip() == (
        "[('resize_image', 'Resize one image to a width, keeping its proportions.')]"
    )
