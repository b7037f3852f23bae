"""manage.py submit sends one sample task per type (or --type) and polls them to a status table."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import SAMPLE_TYPES
from tests.procs import gunicorn, http, manage, running
from workers.management.commands.submit import progress_line, table, wait_for


def listed(*args: str) -> str:
    out = StringIO()
    call_command("submit", "--list", *args, stdout=out)
    return out.getvalue()


def test_submit_list__every_type_with_its_sample_payload() -> None:
    out = listed("--broker", "http://broker.test:9000/")
    names = re.findall(r"^(\S+) ", out, flags=re.MULTILINE)
    assert set(SAMPLE_TYPES) <= set(names)
    assert names == sorted(names)
    assert 'sample: {"url": "http://broker.test:9000/healthz"}' in out
    assert 'sample: {"duration_seconds": 0.5}' in out


def test_submit_list__one_type() -> None:
    out = listed("--type", "send_email")
    assert re.findall(r"^(\S+) ", out, flags=re.MULTILINE) == ["send_email"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--type", "nope"], "unknown job type 'nope'; known: "),
        (["--payload", "{}"], "--payload needs --type"),
    ],
)
def test_submit__bad_arguments__error_before_any_request(args: list[str], message: str) -> None:
    # Port 9 (discard) on loopback: nothing would answer, so any request would fail loudly.
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("submit", "--broker", "http://127.0.0.1:9", *args)


def test_submit__bad_priority__usage_error() -> None:
    with pytest.raises(CommandError, match="invalid choice: 'urgent'"):
        call_command("submit", "--priority", "urgent")


def test_table__columns_result_or_error_truncated() -> None:
    rows = [
        {
            "id": "7",
            "type": "data_transform",
            "priority": "high",
            "state": "done",
            "attempts": 1,
            "result": {"A": "x"},
            "last_error": None,
        },
        {
            "id": "12",
            "type": "fail_job",
            "priority": "normal",
            "state": "dead",
            "attempts": 1,
            "result": None,
            "last_error": "e" * 100,
        },
        {
            "id": "13",
            "type": None,
            "priority": "low",
            "state": "ready",
            "attempts": 0,
            "result": None,
            "last_error": None,
        },
        {
            "id": "14",
            "type": "django_task",
            "priority": "low",
            "state": "dead",
            "attempts": 1,
            "result": None,
            "last_error": "ValueError: no\nTraceback (most recent call last):\n",
        },
    ]
    lines = table(rows).splitlines()
    assert lines[0].split() == [
        "ID",
        "TYPE",
        "PRIORITY",
        "STATE",
        "ATTEMPTS",
        "RESULT",
        "/",
        "LAST",
        "ERROR",
    ]
    assert lines[1].split() == ["7", "data_transform", "high", "done", "1", '{"A":"x"}']
    assert lines[2].split() == ["12", "fail_job", "normal", "dead", "1", "e" * 59 + "…"]
    assert lines[3].split() == ["13", "-", "low", "ready", "0", "-"]
    assert lines[4].split() == ["14", "django_task", "low", "dead", "1", "ValueError:", "no…"]
    assert len(lines) == 5  # a multi-line error stays on its task's line
    # Fixed width: every column starts at the same offset on every line.
    assert len({line.index(line.split()[2]) for line in lines[1:]}) == 1


def test_wait_for__polls_unfinished_until_all_finish() -> None:
    states = {"1": iter(["ready", "handed_out", "done"]), "2": iter(["dead"])}
    fetched: list[str] = []
    seen_progress: list[tuple[int, int]] = []

    def fetch(task_id: str) -> dict:
        fetched.append(task_id)
        return {"id": task_id, "state": next(states[task_id])}

    tasks, finished = wait_for(
        fetch,
        ["1", "2"],
        timeout_s=5,
        interval_s=0.001,
        progress=lambda *p: seen_progress.append(p),
    )
    assert finished
    assert [t["state"] for t in tasks] == ["done", "dead"]
    assert fetched == ["1", "2", "1", "1"]  # a finished task is not fetched again
    assert seen_progress == [(1, 2), (2, 2)]


def test_wait_for__new_progress_reports__each_told_once() -> None:
    half = {"fraction": 0.5, "message": "row 5 of 10"}
    reports = iter([None, half, dict(half), {"fraction": 1, "message": None}])
    states = iter(["ready", "handed_out", "handed_out", "done"])
    told: list[str] = []

    def fetch(task_id: str) -> dict:
        return {"id": task_id, "type": "batch_import", "state": next(states),
                "progress": next(reports)}  # fmt: skip

    wait_for(fetch, ["7"], timeout_s=5, interval_s=0.001, reported=lambda t: told.append(
        progress_line(t)))  # fmt: skip
    assert told == ["batch_import: 50% row 5 of 10", "batch_import: 100%"]


def test_wait_for__timeout__returns_unfinished() -> None:
    tasks, finished = wait_for(
        lambda i: {"id": i, "state": "ready"}, ["1"], timeout_s=0.05, interval_s=0.01
    )
    assert not finished
    assert tasks == [{"id": "1", "state": "ready"}]


# -- end to end: gunicorn + runworker + submit as real processes ---------------------------------


def rows_of(output: str) -> dict[str, list[str]]:
    """The status table in a command's output → {type: [id, priority, state, attempts, outcome]}."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ID "))
    rows = {}
    for line in lines[start + 1 :]:
        cells = re.split(r" {2,}", line.strip(), maxsplit=5)
        if len(cells) < 6 or not cells[0].isdigit():
            break
        rows[cells[1]] = [cells[0], *cells[2:]]
    return rows


@pytest.mark.e2e
@pytest.mark.postgres
def test_submit_e2e__every_sample_type_finishes_and_is_tabled(db_url: str, tmp_path: Path) -> None:
    # http_fetch's sample fetches the broker's own /healthz, on loopback: refused by default.
    loopback = {"BROKER_FETCH_ALLOWED_NETWORKS": "127.0.0.0/8"}
    with gunicorn(db_url, tmp_path, **loopback) as base:
        with running(
            manage(
                [
                    "submit",
                    "--broker",
                    base,
                    "--type",
                    "sleep_job",
                    "--priority",
                    "high",
                    "--no-poll",
                ],
                db_url,
                tmp_path,
                "submit-no-poll",
            )
        ) as queued:
            assert queued.wait(60) == 0, queued.output()
            [(early_id, *early)] = rows_of(queued.output()).values()
        assert early == ["high", "ready", "0", "-"]  # no worker yet: nobody took it

        worker = manage(
            [
                "runworker",
                "--broker",
                base,
                "--concurrency",
                "3",
                "--wait-ms",
                "1000",
                "--log-file",
                str(tmp_path / "jobs.log"),
            ],
            db_url,
            tmp_path,
            "worker",
            **loopback,
        )
        with (
            running(worker),
            running(
                manage(
                    ["submit", "--broker", base, "--timeout", "60", "--interval-ms", "100"],
                    db_url,
                    tmp_path,
                    "submit",
                )
            ) as submit,
        ):
            assert submit.wait(90) == 0, submit.output()
            output = submit.output()
            status, early_task = http("GET", f"{base}/jobs/{early_id}")

    rows = rows_of(output)
    assert set(SAMPLE_TYPES) <= set(rows), output
    assert all(row[2] in ("done", "dead", "cancelled") for row in rows.values()), rows
    outcomes = {name: (rows[name][2], rows[name][4]) for name in SAMPLE_TYPES}
    assert outcomes["fail_job"] == ("dead", "failing on purpose")
    assert outcomes["http_fetch"] == ("done", '{"response_status":200}')
    assert outcomes["sleep_job"] == ("done", '{"slept_seconds":0.5}')
    assert outcomes["batch_import"] == ("done", '{"rows":60,"resumed_at_row":0,"attempt":1}')
    assert re.search(r"batch_import: \d+% row \d+ of 60", output), output  # as it went
    # The order waited for its payment (the lease and the attempt given back), submit sent the
    # event, and the handler resumed with its data and its checkpoint.
    assert re.search(r"order_payment: waits for 'payment' 'order-\d+'; sent it", output), output
    order = rows["order_payment"]
    assert (order[2], order[3]) == ("done", "1"), order
    # The table cuts the outcome to its column: what it shows of the result.
    assert re.match(r'\{"order":\d+,"paid":4200,"resumed_with":\{"reserved":', order[4]), order
    assert outcomes["data_transform"] == ("done", '{"NAME":"Ada Lovelace","BORN":1815}')
    assert outcomes["send_email"][0] == "done"
    assert outcomes["send_email"][1].startswith('{"sent_to":"ada@example.com"')
    assert outcomes["image_resize"][0] == "done"
    assert outcomes["image_resize"][1].startswith(
        '{"source":{"width":320,"height":240},"resized":{"width":160'
    )
    assert all(rows[name][1] == "normal" for name in SAMPLE_TYPES)
    assert "submitted sleep_job:" in output
    # The sample workflow: a diamond whose steps read what the steps before them returned.
    assert re.search(r"^workflow \d+ \(sample-diamond\): succeeded$", output, re.M), output
    steps = {
        line.split()[0]: line.split(maxsplit=4)
        for line in output[output.index("sample-diamond):") :].splitlines()[2:6]
    }
    assert list(steps) == ["extract", "left", "right", "load"]
    assert [steps[ref][2:4] for ref in steps] == [
        ["-", "done"], ["extract", "done"], ["extract", "done"], ["left,right", "done"],
    ]  # fmt: skip
    # Results are cut to a line: load's starts with left's, left's with extract's.
    assert steps["load"][4].startswith(f'{{"label":"load","inputs":{{"{steps["left"][1]}":')
    assert steps["left"][4].startswith(f'{{"label":"left","inputs":{{"{steps["extract"][1]}":')
    assert (status, early_task["state"], early_task["result"]) == (
        200,
        "done",
        {"slept_seconds": 0.5},
    )


def _submit_without_worker(db_url: str, tmp_path: Path, *args: str) -> tuple[int, str]:
    """manage.py submit *args against a one-process broker no worker serves: exit code, output."""
    with gunicorn(db_url, tmp_path, WORKERS="1") as base:
        command = manage(["submit", "--broker", base, *args], db_url, tmp_path, "submit")
        with running(command) as submit:
            return submit.wait(60), submit.output()


@pytest.mark.e2e
@pytest.mark.postgres
def test_submit_e2e__no_worker__times_out_exit_1(db_url: str, tmp_path: Path) -> None:
    code, output = _submit_without_worker(
        db_url, tmp_path, "--type", "data_transform", "--timeout", "1",
        "--payload", '{"input": {"a": " b "}}',
    )  # fmt: skip
    assert code == 1
    assert "1 task unfinished after 1 s" in output
    [row] = rows_of(output).values()
    assert row[1:4] == ["normal", "ready", "0"]


@pytest.mark.e2e
@pytest.mark.postgres
def test_submit_e2e__refused_payload__exit_1_naming_the_field(db_url: str, tmp_path: Path) -> None:
    code, output = _submit_without_worker(
        db_url, tmp_path, "--type", "image_resize", "--payload", '{"width": 99999, "height": 1}'
    )
    assert code == 1
    assert "refused image_resize: 400" in output
    assert "payload.width" in output
    assert "refused by the broker: image_resize" in output


@pytest.mark.e2e
@pytest.mark.postgres
def test_submit_e2e__default_setup__loopback_fetch_sample_skipped_saying_how_exit_0(
    db_url: str, tmp_path: Path
) -> None:
    # The broker as `make run` starts it: BROKER_FETCH_ALLOWED_NETWORKS unset.
    code, output = _submit_without_worker(db_url, tmp_path, "--type", "http_fetch", "--no-poll")
    assert code == 0, output
    assert "skipped http_fetch:" in output
    assert "BROKER_FETCH_ALLOWED_NETWORKS=127.0.0.0/8 for broker and worker" in output
    assert "refused" not in output.replace("refuses", "")
    assert "submitted" not in output and "ID " not in output  # nothing enqueued, no table
