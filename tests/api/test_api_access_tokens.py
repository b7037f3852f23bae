"""Access tokens with grants (API.md): 401 and 403 as the contract says, two tenants apart in
every route, the secret kept as a hash only, per-token idempotency keys, enqueued_by."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from broker.models import AccessToken, Task, TokenGeneration
from broker.tokens import auth, making

pytestmark = pytest.mark.django_db


def token(*grants: str, name: str | None = None, **kw: Any) -> str:
    """A new database token's secret."""
    return making.make(name or f"t{AccessToken.objects.count()}", list(grants), **kw).secret


def call(method: str, url: str, secret: str | None, body: Any = None) -> Any:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    client = APIClient()
    if body is None:
        return getattr(client, method)(url, headers=headers)
    return getattr(client, method)(
        url, json.dumps(body), content_type="application/json", headers=headers
    )


def enqueue(secret: str | None, queue: str, **extra: Any) -> str:
    r = call("post", "/jobs", secret, {"payload": {"q": queue}, "queue": queue, **extra})
    assert r.status_code in (200, 201), r.content
    return str(r.json()["id"])


# -- making tokens ------------------------------------------------------------------------------


def test_createtoken__prints_secret_once__stores_only_its_hash() -> None:
    out = io.StringIO()
    err = io.StringIO()
    call_command(
        "createtoken", "tenant-a-producer", "--grant", "produce:tenant-a.*", stdout=out,
        stderr=err,
    )  # fmt: skip
    secret = out.getvalue().strip()  # the secret alone on stdout
    assert "shown this once" in err.getvalue()
    assert auth.TOKEN_RE.fullmatch(secret)
    row = AccessToken.objects.get(name="tenant-a-producer")
    assert row.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in json.dumps(
        {f.name: str(getattr(row, f.name)) for f in AccessToken._meta.fields}
    )
    assert row.grants == ["produce:tenant-a.*"] and row.prefix == secret[3:11]
    assert call("post", "/jobs", secret, {"payload": 1, "queue": "tenant-a.x"}).status_code == 201


def test_createtoken__expires_and_actions_joined__stored() -> None:
    out = io.StringIO()
    call_command(
        "createtoken", "w", "--grant", "consume+read:a.*", "--grant", "all:b",
        "--expires", "30d", stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    row = AccessToken.objects.get(name="w")
    assert row.grants == ["consume+read:a.*", "produce+consume+read+manage:b"]
    left = row.expires_at - timezone.now()
    assert timedelta(days=29, hours=23) < left <= timedelta(days=30)


@pytest.mark.parametrize(
    "grant", ["produce", "steal:a", "produce+:a", ":a", "produce:", "read:a b", "read:[ab]"]
)
def test_createtoken__bad_grant__refused_naming_it(grant: str) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--grant"):
        call_command(
            "createtoken", "x", "--grant", grant, stdout=io.StringIO(), stderr=io.StringIO()
        )
    assert not AccessToken.objects.exists()


# -- 401 ----------------------------------------------------------------------------------------


def test_no_db_token__open_broker() -> None:
    assert call("get", "/stats", None).status_code == 200


def test_any_db_token__api_closed__even_revoked() -> None:
    token("read:*")
    making.revoke(AccessToken.objects.all())
    r = call("get", "/stats", None)
    assert (r.status_code, r.json()) == (401, {"error": "Missing or wrong bearer token."})
    assert r["WWW-Authenticate"] == 'Bearer realm="broker"'
    assert call("get", "/healthz", None).status_code == 200


@pytest.mark.parametrize("how", ["unknown", "wrong_secret", "revoked", "expired"])
def test_refused_token__401(how: str) -> None:
    secret = token("all:*", name="mine")
    if how == "unknown":
        secret = making.new_secret()[1]
    elif how == "wrong_secret":
        secret = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
    elif how == "revoked":
        assert call("get", "/stats", secret).status_code == 200  # cached first
        making.revoke(AccessToken.objects.filter(name="mine"))
    else:
        assert call("get", "/stats", secret).status_code == 200
        AccessToken.objects.filter(name="mine").update(expires_at=timezone.now())
        auth.invalidate()
    r = call("get", "/stats", secret)
    assert (r.status_code, r.json()) == (401, {"error": "Missing or wrong bearer token."})


def test_expiry__refused_without_a_query_once_past(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = token("all:*", expires_at=timezone.now() + timedelta(seconds=30))
    assert call("get", "/stats", secret).status_code == 200
    later = timezone.now() + timedelta(seconds=31)
    monkeypatch.setattr(auth.timezone, "now", lambda: later)
    with CaptureQueriesContext(connection) as ctx:
        assert call("get", "/jobs/x", secret).status_code == 401
    assert ctx.captured_queries == []


def test_env_tokens__keep_every_right(settings: Any) -> None:
    settings.BROKER_API_TOKENS = ["env-token"]
    token("read:nothing-of-yours")
    assert call("post", "/jobs", "env-token", {"payload": 1, "queue": "q"}).status_code == 201
    assert call("put", "/types/mine", "env-token", {"schema": None}).status_code == 201
    assert call("get", "/stats", "env-token").status_code == 200


# -- constant time ------------------------------------------------------------------------------


def test_db_token__compared_in_constant_time__unknown_prefix_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = token("read:*")
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert call("get", "/stats", secret).status_code == 200
    assert call("get", "/stats", making.new_secret()[1]).status_code == 401
    assert call("get", "/stats", secret[:-1] + "x").status_code == 401
    # Every one a compare_digest of two 32-byte digests: a found prefix or not.
    assert calls == [(32, 32)] * 3


@settings(max_examples=150, deadline=None)
@given(
    header=st.one_of(
        st.text(max_size=120),
        st.text(max_size=80).map(lambda s: "Bearer " + s),
        st.from_regex(r"Bearer bq_[0-9a-f]{8}_[A-Za-z0-9_-]{43}", fullmatch=True),
        st.binary(max_size=80).map(lambda b: "Bearer " + b.decode("latin-1")),
    )
)
def test_fuzzed_authorization__401_or_200__never_500(header: str) -> None:
    if not AccessToken.objects.exists():
        token("read:*", name="fuzz")
    r = APIClient().get("/stats", HTTP_AUTHORIZATION=header)
    assert r.status_code in (200, 401), (header, r.status_code)
    assert "error" in r.json() or r.status_code == 200


# -- two tenants --------------------------------------------------------------------------------


@pytest.fixture
def tenants() -> dict[str, str]:
    return {
        "a": token("all:tenant-a.*", name="tenant-a"),
        "b": token("all:tenant-b.*", name="tenant-b"),
    }


def test_tenants__cannot_see_or_change_each_others_tasks(tenants: dict[str, str]) -> None:
    a, b = tenants["a"], tenants["b"]
    mine = enqueue(a, "tenant-a.jobs")
    enqueue(b, "tenant-b.jobs")
    unknown = call("get", "/jobs/999999999", b)
    for method, url in [
        ("get", f"/jobs/{mine}"), ("delete", f"/jobs/{mine}"),
        ("post", f"/jobs/{mine}/ack?lease_id=x"), ("post", f"/jobs/{mine}/nack?lease_id=x"),
        ("post", f"/jobs/{mine}/extend?lease_id=x"), ("post", f"/dlq/{mine}/requeue"),
    ]:  # fmt: skip
        r = call(method, url, b)
        assert r.status_code == 404, (method, url, r.content)
    # Exactly as an unknown id.
    assert call("get", f"/jobs/{mine}", b).json() == unknown.json()
    listed = call("get", "/jobs", b).json()["results"]
    assert [t["queue"] for t in listed] == ["tenant-b.jobs"]
    assert call("get", "/jobs?queue=tenant-a.jobs", b).json()["results"] == []
    # A claim naming no queue takes only b's; naming a's queue is a 403.
    got = call("get", "/jobs/next?wait_ms=0", b).json()
    assert got["task"]["queue"] == "tenant-b.jobs"
    assert call("get", "/jobs/next?wait_ms=0", b).status_code == 204
    r = call("get", "/jobs/next?wait_ms=0&queue=tenant-a.jobs", b)
    assert r.status_code == 403
    assert r.json() == {"error": "This token has no grant to consume on queue 'tenant-a.jobs'."}
    r = call("post", "/jobs/claim", b, {"wait_ms": 0, "queues": ["tenant-a.jobs"]})
    assert r.status_code == 403
    assert call("post", "/jobs", b, {"payload": 1, "queue": "tenant-a.jobs"}).status_code == 403
    assert Task.objects.get(pk=mine).state == "ready"
    # a's own task is a's to see and take.
    assert call("get", f"/jobs/{mine}", a).status_code == 200
    assert call("get", "/jobs/next?wait_ms=0", a).json()["task"]["id"] == mine


def test_tenants__batch_settles_of_anothers_task__404_items(tenants: dict[str, str]) -> None:
    a, b = tenants["a"], tenants["b"]
    enqueue(a, "tenant-a.jobs")
    held = call("get", "/jobs/next?wait_ms=0", a).json()
    item = {"id": held["task"]["id"], "lease_id": held["lease_id"]}
    r = call("post", "/jobs/ack", b, {"acks": [item]})
    assert r.json()["results"][0]["status"] == 404
    r = call("post", "/jobs/claim", b, {"wait_ms": 0, "nacks": [item]})
    assert r.json()["results"][0]["status"] == 404
    assert Task.objects.get(pk=held["task"]["id"]).state == "handed_out"
    r = call("post", "/jobs/ack", a, {"acks": [item]})
    assert r.json()["results"] == [{"id": item["id"], "status": 204}]


def test_tenants__after_naming_anothers_task__400_as_unknown(tenants: dict[str, str]) -> None:
    theirs = enqueue(tenants["a"], "tenant-a.jobs")
    r = call(
        "post", "/jobs", tenants["b"], {"payload": 1, "queue": "tenant-b.x", "after": [theirs]}
    )
    unknown = call("post", "/jobs", tenants["b"], {"payload": 1, "queue": "tenant-b.x",
                                                    "after": ["999999999"]})  # fmt: skip
    assert r.status_code == 400 and r.json() == unknown.json()
    assert r.json()["fields"] == {"after.0": ["No such task."]}
    r = call("post", "/jobs/batch", tenants["b"],
             {"jobs": [{"payload": 1, "queue": "tenant-b.x", "after": [theirs]}]})  # fmt: skip
    assert (r.status_code, r.json()["fields"]) == (400, {"jobs.0.after.0": ["No such task."]})


def test_tenants__idempotency_keys_kept_apart__enqueued_by_shown(
    tenants: dict[str, str], settings: Any
) -> None:
    settings.BROKER_API_TOKENS = ["env"]
    a, b = tenants["a"], tenants["b"]
    first = enqueue(a, "tenant-a.x", idempotency_key="order-1")
    again = call(
        "post", "/jobs", a, {"payload": 2, "queue": "tenant-a.x", "idempotency_key": "order-1"}
    )
    assert (again.status_code, again.json()["id"]) == (200, first)
    other = enqueue(b, "tenant-b.x", idempotency_key="order-1")
    assert other != first
    shared = enqueue("env", "tenant-a.x", idempotency_key="order-1")  # the shared space
    assert shared not in (first, other)
    shown = call("get", f"/jobs/{first}", a).json()
    assert (shown["enqueued_by"], shown["idempotency_key"]) == ("tenant-a", "order-1")
    assert call("get", f"/jobs/{shared}", a).json()["enqueued_by"] is None


def test_tenants__lists_of_queues_dlq_workflows_cut_to_grants(tenants: dict[str, str]) -> None:
    a, b = tenants["a"], tenants["b"]
    enqueue(a, "tenant-a.x")
    enqueue(b, "tenant-b.x")
    assert [q["name"] for q in call("get", "/queues", b).json()["results"]] == ["tenant-b.x"]
    assert call("get", "/queues/tenant-a.x", b).status_code == 404
    assert call("patch", "/queues/tenant-a.x", b, {"paused": True}).status_code == 403
    wf = {"name": "w", "steps": [{"ref": "s", "job": {"payload": 1, "queue": "tenant-a.x"}}]}
    assert call("post", "/workflows", b, wf).status_code == 403
    made = call("post", "/workflows", a, wf).json()
    assert call("get", f"/workflows/{made['id']}", b).status_code == 404
    assert call("delete", f"/workflows/{made['id']}", b).status_code == 404
    assert call("get", "/workflows", b).json()["results"] == []
    assert [w["id"] for w in call("get", "/workflows", a).json()["results"]] == [made["id"]]
    step = call("get", f"/jobs/{made['tasks']['s']}", a).json()
    assert step["enqueued_by"] == "tenant-a"


def test_everywhere_routes__need_the_action_on_every_queue(tenants: dict[str, str]) -> None:
    a = tenants["a"]
    for url in ("/stats", "/metrics", "/types", "/stats/history"):
        r = call("get", url, a)
        assert (r.status_code, r.json()) == (
            403, {"error": "This token has no grant to read on every queue."},
        ), url  # fmt: skip
    assert call("get", "/stats/history?queue=tenant-a.x", a).status_code == 200
    assert call("get", "/stats/history?queue=tenant-b.x", a).status_code == 403
    assert call("put", "/types/mine", a, {"schema": None}).status_code == 403
    operator = token("read:*", name="dashboard")
    for url in ("/stats", "/metrics", "/types", "/stats/history", "/jobs", "/queues"):
        assert call("get", url, operator).status_code == 200, url
    assert call("put", "/types/mine", operator, {"schema": None}).status_code == 403
    assert call("post", "/jobs", operator, {"payload": 1}).status_code == 403


def test_schedules__managed_on_their_jobs_queue(tenants: dict[str, str]) -> None:
    a, b = tenants["a"], tenants["b"]
    body = {"name": "nightly", "every_s": 60, "job": {"payload": 1, "queue": "tenant-a.x"}}
    assert call("post", "/schedules", b, body).status_code == 403
    assert call("post", "/schedules", a, body).status_code == 201
    assert call("get", "/schedules/nightly", b).status_code == 404
    assert call("delete", "/schedules/nightly", b).status_code == 404
    assert call("get", "/schedules", b).json()["results"] == []
    assert [s["name"] for s in call("get", "/schedules", a).json()["results"]] == ["nightly"]
    moved = {"job": {"payload": 1, "queue": "tenant-b.x"}}
    assert call("patch", "/schedules/nightly", a, moved).status_code == 403


def test_claim_naming_no_queue__wildcard_grants__only_matching_queues() -> None:
    worker = token("consume:tenant-a.*", "consume:exact", name="w")
    producer = token("produce:*", name="p")
    ids = {q: enqueue(producer, q) for q in ("other", "tenant-ab", "tenant-a.one", "exact")}
    got = {call("get", "/jobs/next?wait_ms=0", worker).json()["task"]["id"] for _ in range(2)}
    assert got == {ids["tenant-a.one"], ids["exact"]}
    assert call("get", "/jobs/next?wait_ms=0", worker).status_code == 204
    assert call("post", "/jobs/claim", worker, {"wait_ms": 0, "max": 10}).status_code == 204


def test_consume_grant_only__naming_no_queue_without_consume__403() -> None:
    producer = token("produce:*")
    r = call("get", "/jobs/next?wait_ms=0", producer)
    assert (r.status_code, r.json()) == (
        403, {"error": "This token has no grant to consume on every queue."},
    )  # fmt: skip


# -- fast and fresh -----------------------------------------------------------------------------


def test_seen_token__no_query_for_itself__last_use_written_once_a_minute() -> None:
    secret = token("all:*", name="hot")
    call("get", "/jobs/next?wait_ms=0", secret)  # first sight: read, last use written
    assert AccessToken.objects.get(name="hot").last_used_at is not None
    enqueue(secret, "q")
    with CaptureQueriesContext(connection) as ctx:
        assert call("get", "/jobs/next?wait_ms=0", secret).status_code == 200
        assert call("post", "/jobs", secret, {"payload": 1}).status_code == 201
    assert [q["sql"] for q in ctx.captured_queries if "accesstoken" in q["sql"]] == []


def test_revalidation__a_revocation_elsewhere_seen_after_refresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = token("all:*", name="r")
    token("read:*", name="newer")  # the newest change is its
    assert call("get", "/stats", secret).status_code == 200
    # Another process revokes it (making.revoke there: the row, then the generation), on a host
    # whose clock is an hour behind: no signal here. Seen once the cache is REFRESH_S old.
    behind = timezone.now() - timedelta(hours=1)
    AccessToken.objects.filter(name="r").update(revoked_at=behind, changed_at=behind)
    TokenGeneration.objects.filter(pk=1).update(n=F("n") + 1)
    assert call("get", "/stats", secret).status_code == 200  # within REFRESH_S (3600 in tests)
    monkeypatch.setattr(auth, "REFRESH_S", 0.0)
    assert call("get", "/stats", secret).status_code == 401


def test_docs_tenants__its_createtoken_commands_run() -> None:
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "tenants.md").read_text()
    commands = [
        shlex.split(line)[2:]
        for line in text.splitlines()
        if line.startswith("python manage.py createtoken")
    ]
    assert len(commands) == 3
    for args in commands:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    assert set(AccessToken.objects.values_list("name", flat=True)) == {
        "tenant-a-producer", "tenant-a-workers", "grafana",
    }  # fmt: skip


def test_claim_naming_no_queue__patterns__one_statement_on_postgresql() -> None:
    worker = token("consume:tenant-a.*", name="w")
    producer = token("produce:*", name="p")
    mine = enqueue(producer, "tenant-a.one")
    enqueue(producer, "tenant-b.one")
    with CaptureQueriesContext(connection) as ctx:
        got = call("get", "/jobs/next?wait_ms=0", worker)
    assert got.json()["task"]["id"] == mine
    claims = [q["sql"] for q in ctx.captured_queries if "broker_task" in q["sql"]]
    if connection.vendor == "postgresql":
        assert len(claims) == 1, claims  # the match is inside the claim's own statement


@pytest.mark.parametrize("setting", [{"paused": True}, {"max_in_flight": 1}, {"rate_per_s": 1}])
def test_claim_naming_no_queue__patterns__restricted_queues_obeyed(setting: dict) -> None:
    worker = token("consume:tenant-a.*", name="w")
    ops = token("all:*", name="ops")
    assert call("patch", "/queues/tenant-a.held", ops, setting).status_code == 200
    held = [enqueue(ops, "tenant-a.held") for _ in range(2)]
    free = enqueue(ops, "tenant-a.free")
    enqueue(ops, "tenant-b.other")
    got = []
    while (r := call("get", "/jobs/next?wait_ms=0", worker)).status_code == 200:
        got.append(r.json()["task"]["id"])
    expected = {free} if "paused" in setting else {free, held[0]}
    assert set(got) == expected


def test_createtoken_sqs__key_lines_then_the_secret_last() -> None:
    out = io.StringIO()
    call_command("createtoken", "s", "--grant", "all:*", "--sqs", stdout=out, stderr=io.StringIO())
    key_line, secret_line, token_line = out.getvalue().strip().splitlines()
    row = AccessToken.objects.get(name="s")
    assert key_line == f"AWS_ACCESS_KEY_ID={row.sqs_key_id}"
    assert making.decrypt(row.sqs_secret_encrypted) == secret_line.partition("=")[2]
    assert row.secret_hash == hashlib.sha256(token_line.encode()).hexdigest()


def test_waiting__a_patterned_workers_polls_count_for_its_queues_only() -> None:
    worker = token("consume:tenant-a.*", name="w")
    ops = token("all:*", name="ops")
    mine = [enqueue(ops, "tenant-a.x") for _ in range(2)]
    theirs = enqueue(ops, "tenant-b.x")
    assert call("get", "/jobs/next?wait_ms=0", worker).json()["task"]["id"] == mine[0]
    assert call("get", f"/jobs/{mine[1]}", ops).json()["waiting"]["reason"] == "queued"
    assert call("get", f"/jobs/{theirs}", ops).json()["waiting"]["reason"] == "no_workers"


def test_database_away__known_tokens_still_checked__unknown_state_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.db import OperationalError

    secret = token("all:*", name="k")
    assert call("get", "/stats", secret).status_code == 200  # known: generation and the token

    class Away:
        in_atomic_block = False

        def cursor(self) -> Any:
            raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(auth, "connection", Away())
    monkeypatch.setattr(auth, "REFRESH_S", 0.0)
    # A parked claim's next look, a failover: what was known stays; no 503 from the token check.
    assert auth.authenticate(f"Bearer {secret}") is not None
    assert auth.authenticate("") is None  # still closed
    auth.invalidate()
    with auth._cache.lock:
        auth._cache.generation = None
    with pytest.raises(OperationalError):
        auth.closed()
    # A request then: a 503 to retry, as for any request the database cannot answer, not a 500
    # (seen in the vanished-host test: a process's first token check during the failover).
    answer = call("post", "/jobs", secret, {"payload": 1})
    assert (answer.status_code, answer["Content-Type"]) == (503, "application/json"), answer
    assert "error" in answer.json()


def test_unique_enqueues__single_and_batch__show_their_token(tenants: dict[str, str]) -> None:
    """Unique enqueues take their own statements (broker.queue.unique): the token's name goes
    into them too."""
    a = tenants["a"]
    one = enqueue(a, "tenant-a.x", unique={"key": "doc-1"})
    held = call(
        "post", "/jobs", a, {"payload": 2, "queue": "tenant-a.x", "unique": {"key": "doc-1"}}
    )
    assert (held.status_code, held.json()) == (200, {"id": one, "deduplicated": True})
    batch = call(
        "post",
        "/jobs/batch",
        a,
        {
            "jobs": [
                {"payload": n, "queue": "tenant-a.x", "unique": {"key": f"doc-{n}"}}
                for n in (2, 2, 3)
            ]
        },
    )
    assert batch.status_code == 201, batch.content
    assert batch.json()["deduplicated"] == [1]
    for pk in {one, *batch.json()["ids"]}:
        assert call("get", f"/jobs/{pk}", a).json()["enqueued_by"] == "tenant-a"
