"""docs/reference/: one section per endpoint the OpenAPI schema serves, and no other.

Each endpoint's section is a heading "### `METHOD /path`" in docs/reference/*.md. Path parameters
are compared by position, not name (`{id}` in the docs, `{task_id}` in the schema). A few pages
the broker serves outside its JSON API (the index of links, the schema and docs pages, the SQS
protocol) are documented too but are not in the schema: they are listed here, and each must
still be a route the broker serves and stay out of the schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import Resolver404, resolve

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
HEADING = re.compile(r"### `(?P<method>[A-Z]+) (?P<path>/[^`\s]*)`")
# A heading that starts like an endpoint's; it must then be exactly one (HEADING, whole line).
LOOKS_LIKE_ENDPOINT = re.compile(r"#{1,6}\s*`?(" + "|".join(METHODS) + r")\s+/")

# Served, documented, and not part of the OpenAPI schema (urls: queueproject/urls.py,
# broker/sqs/urls.py).
OUTSIDE_SCHEMA = {("GET", "/"), ("GET", "/api/schema/"), ("GET", "/api/docs/"), ("POST", "/sqs")}

Endpoint = tuple[str, str]


def normal(path: str) -> str:
    """A path with every parameter written `{}`: `/jobs/{task_id}` and `/jobs/{id}` are one."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def schema_endpoints() -> set[Endpoint]:
    """(METHOD, normalised path) of every operation of the schema the broker serves."""
    # The schema needs the bearer token when tokens are set: here, whatever the environment, none.
    with override_settings(BROKER_API_TOKENS=[]):
        response = Client(SERVER_NAME="localhost").get("/api/schema/?format=json")
    assert response.status_code == 200, response.content[:500]
    schema: dict[str, Any] = response.json()
    return {
        (method.upper(), normal(path))
        for path, item in schema["paths"].items()
        for method in item
        if method.upper() in METHODS
    }


def documented(
    folder: Path = REFERENCE,
) -> tuple[dict[Endpoint, list[str]], list[str]]:
    """The endpoint headings of the pages in `folder`: ({(METHOD, normalised path): ["page:line",
    ...]}, [headings that look like an endpoint's but are not exactly one, "page:line: text"])."""
    found: dict[Endpoint, list[str]] = {}
    malformed: list[str] = []
    for page in sorted(folder.glob("*.md")):
        in_fence = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith("```"):
                in_fence = not in_fence
            if in_fence:
                continue
            where = f"{page.name}:{number}"
            match = HEADING.fullmatch(line)
            if match:
                endpoint = (match["method"], normal(match["path"]))
                found.setdefault(endpoint, []).append(where)
            elif LOOKS_LIKE_ENDPOINT.match(line):
                malformed.append(f"{where}: {line}")
    return found, malformed


def _listed(endpoints: set[Endpoint]) -> str:
    return ", ".join(
        f"{method} {path}" for method, path in sorted(endpoints, key=lambda e: e[::-1])
    )


def compare(served: set[Endpoint], docs: set[Endpoint]) -> list[str]:
    """What is wrong between the schema (`served`, plus OUTSIDE_SCHEMA) and the headings."""
    expected = served | OUTSIDE_SCHEMA
    problems = []
    if missing := expected - docs:
        problems.append(f"served but with no '### `METHOD /path`' heading: {_listed(missing)}")
    if extra := docs - expected:
        problems.append(f"a heading for an endpoint the schema does not have: {_listed(extra)}")
    return problems


def test_reference__every_schema_endpoint_has_a_heading__and_every_heading_an_endpoint() -> None:
    found, malformed = documented()
    assert not malformed, "endpoint headings must read exactly ### `METHOD /path`: " + "; ".join(
        malformed
    )
    twice = {f"{m} {p} ({', '.join(where)})" for (m, p), where in found.items() if len(where) > 1}
    assert not twice, f"an endpoint with two headings: {'; '.join(sorted(twice))}"
    problems = compare(schema_endpoints(), set(found))
    assert not problems, "; ".join(problems)


def test_reference__pages_outside_the_schema__are_served_and_not_in_it() -> None:
    served = schema_endpoints()
    for method, path in sorted(OUTSIDE_SCHEMA):
        assert (method, normal(path)) not in served, (
            f"{method} {path} is in the schema now: drop it from OUTSIDE_SCHEMA"
        )
        try:
            resolve(path)
        except Resolver404:
            pytest.fail(f"{method} {path} is documented but the broker has no such route")


def test_compare__names_what_either_side_lacks() -> None:
    served = {("GET", "/jobs/{}"), ("DELETE", "/jobs/{}")} | OUTSIDE_SCHEMA
    docs = {("GET", "/jobs/{}"), ("PUT", "/jobs/{}")} | OUTSIDE_SCHEMA
    problems = compare(served, docs)
    assert problems == [
        "served but with no '### `METHOD /path`' heading: DELETE /jobs/{}",
        "a heading for an endpoint the schema does not have: PUT /jobs/{}",
    ]


def test_documented__reads_headings_and_refuses_near_misses(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "# A\n\n### `GET /jobs/{id}`\n\n### `DELETE /jobs/{task_id}`\n"
        "### GET /jobs\n### `POST /jobs` — enqueue\n\n```\n### `PUT /in/a/fence`\n```\n"
    )
    found, malformed = documented(tmp_path)
    assert set(found) == {("GET", "/jobs/{}"), ("DELETE", "/jobs/{}")}
    assert malformed == ["a.md:6: ### GET /jobs", "a.md:7: ### `POST /jobs` — enqueue"]


# -- the index: every endpoint linked, every link to a heading that exists -------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, punctuation but `-` and `_` dropped,
    spaces as `-`."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    out, in_fence = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and (m := re.match(r"#{1,6} (.+)", line)):
            out.add(slug(m[1]))
    return out


def test_index__links_every_endpoint_heading__to_an_anchor_that_exists() -> None:
    index = (REFERENCE / "README.md").read_text()
    links = re.findall(r"\[`([A-Z]+ /[^`]*)`\]\(([a-z]+\.md)#([^)]+)\)", index)
    linked = {(text.split(" ", 1)[0], normal(text.split(" ", 1)[1])) for text, _, _ in links}
    found, _ = documented()
    assert set(found) - linked == set(), f"not in the index: {_listed(set(found) - linked)}"
    broken = [
        f"{page}#{anchor}" for _, page, anchor in links if anchor not in anchors(REFERENCE / page)
    ]
    assert not broken, f"index links to no heading: {broken}"
