"""A POST /workflows body checked whole: name, steps, refs, their jobs (as POST /jobs checks
them), and the graph their `after` lists draw, which must have no cycle. Every problem is named
by its place in the body (`steps.3.after.0`, `steps.1.job.max_attempts`); nothing is stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker import queue, validation
from broker.exceptions import InvalidFields, InvalidTaskError
from broker.queue import NewTask
from broker.types.checks import TypeBook
from contract import limits

FIELDS = frozenset({"name", "steps"})
STEP_FIELDS = frozenset({"ref", "job", "after", "after_policy"})


class WorkflowError(InvalidFields):
    """A workflow the API answers with a 400; `fields` names each problem."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step, checked: its ref, its task, and the refs it waits for."""

    ref: str
    task: NewTask
    after: tuple[str, ...]
    after_policy: str


def _lone_surrogate(text: str) -> bool:
    """JSON can carry one (`"\\ud800"`); UTF-8, and so the database, cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def checked(body: Any) -> tuple[str, list[Step]]:
    """(name, steps) of a POST /workflows body. Raises WorkflowError naming every problem."""
    if not isinstance(body, dict):
        raise WorkflowError({"body": ["Must be a JSON object."]})
    found: dict[str, list[str]] = {k: ["Unknown field."] for k in body if k not in FIELDS}
    name = body.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= limits.MAX_WORKFLOW_NAME:
        found["name"] = [f"Required: a string of 1 to {limits.MAX_WORKFLOW_NAME} characters."]
    elif "\x00" in name:
        found["name"] = ["Must not hold U+0000."]
    elif not name.isascii() and _lone_surrogate(name):
        found["name"] = ["Must not hold a lone surrogate (U+D800 to U+DFFF)."]
    raw = body.get("steps")
    if not isinstance(raw, list) or not 1 <= len(raw) <= limits.MAX_WORKFLOW_STEPS:
        found["steps"] = [f"Required: a list of 1 to {limits.MAX_WORKFLOW_STEPS} steps."]
        raise WorkflowError(found)
    steps = _steps(raw, found)
    if not found:
        found.update(_cycle(steps))
    if found:
        raise WorkflowError(found)
    return str(name), steps


def submit(
    body: Any, stamp: Callable[[NewTask], NewTask] = lambda task: task
) -> tuple[int, dict[str, int]]:
    """Check a workflow (raises WorkflowError) and enqueue it, all or nothing: (its id, {ref:
    task id}). `stamp`: each step's task as the caller may make it (an access token's)."""
    name, steps = checked(body)
    return queue.enqueue_graph(
        name, [(s.ref, stamp(s.task), s.after, s.after_policy) for s in steps]
    )


def _steps(raw: list[Any], found: dict[str, list[str]]) -> list[Step]:
    """Each step checked on its own, then every `after` against the refs; problems into found."""
    refs: dict[str, int] = {}
    steps: list[Step] = []
    jobs = []
    for i, item in enumerate(raw):
        at = f"steps.{i}"
        if not isinstance(item, dict):
            found[at] = ["Must be an object: {ref, job, after, after_policy}."]
            continue
        found.update({f"{at}.{k}": ["Unknown field."] for k in item if k not in STEP_FIELDS})
        ref = item.get("ref")
        if not isinstance(ref, str) or not limits.REF_RE.fullmatch(ref):
            found[f"{at}.ref"] = [f"Required: a ref matching {limits.REF_RULE}."]
        elif ref in refs:
            found[f"{at}.ref"] = [f"Step {refs[ref]} has this ref already."]
        else:
            refs[ref] = i
        policy = item.get("after_policy", limits.DEFAULT_AFTER_POLICY)
        if policy not in limits.AFTER_POLICIES:
            found[f"{at}.after_policy"] = [f"Must be one of {', '.join(limits.AFTER_POLICIES)}."]
        after = _after(item.get("after"), f"{at}.after", found)
        job = item.get("job")
        if isinstance(job, dict):
            for key in ("after", "after_policy"):
                if key in job:
                    found[f"{at}.job.{key}"] = [f"Give {key} at the step, naming refs."]
        jobs.append((i, job))
        steps.append(Step(str(ref), NewTask(payload="null"), after, str(policy)))
    tasks = _jobs(jobs, found)
    for i, step in enumerate(steps):
        for j, name in enumerate(step.after):
            if name not in refs:
                found[f"steps.{i}.after.{j}"] = [f"No step has the ref {name!r}."]
            elif name == step.ref:
                found[f"steps.{i}.after.{j}"] = ["A step cannot wait for itself."]
    return [
        Step(step.ref, tasks.get(i, step.task), step.after, step.after_policy)
        for i, step in enumerate(steps)
    ]


def _after(raw: Any, at: str, found: dict[str, list[str]]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > limits.MAX_AFTER:
        found[at] = [f"Must be a list of at most {limits.MAX_AFTER} refs."]
        return ()
    names: list[str] = []
    for j, name in enumerate(raw):
        if not isinstance(name, str):
            found[f"{at}.{j}"] = ["Must be the ref of a step."]
        elif name in names:
            found[f"{at}.{j}"] = ["Named twice."]
        else:
            names.append(name)
    return tuple(names)


def _jobs(jobs: list[tuple[int, Any]], found: dict[str, list[str]]) -> dict[int, NewTask]:
    """Each step's job as POST /jobs checks it (the fast path first), by step index."""
    tasks: dict[int, NewTask] = {}
    types = TypeBook()  # each job type read once for the whole graph
    for i, job in jobs:
        try:
            tasks[i] = validation.new_task(job, types)
        except InvalidTaskError as exc:
            for name, messages in exc.fields.items():
                whole = name in ("", "body")
                found[f"steps.{i}.job" if whole else f"steps.{i}.job.{name}"] = messages
    keys = [t.idempotency_key for t in tasks.values() if t.idempotency_key is not None]
    if len(keys) != len(set(keys)):
        seen: set[str] = set()
        for i, task in tasks.items():
            key = task.idempotency_key
            if key is not None and key in seen:
                found[f"steps.{i}.job.idempotency_key"] = ["Another step has this key."]
            seen.add(key or "")
    return tasks


def _named(steps: list[Step], cycle: list[int]) -> dict[str, list[str]]:
    """The cycle's problem, named at its first step in the body: the `after` item of that step
    that leads on around the cycle (each step of `cycle` waits for the next, the last for the
    first)."""
    start = cycle.index(min(cycle))
    cycle = cycle[start:] + cycle[:start]
    first, then = steps[cycle[0]], steps[cycle[1 % len(cycle)]]
    shown = " → ".join(steps[i].ref for i in [*cycle, cycle[0]])
    return {f"steps.{cycle[0]}.after.{first.after.index(then.ref)}": [f"A cycle: {shown}."]}


def _cycle(steps: list[Step]) -> dict[str, list[str]]:
    """{"steps.i.after.j": [...]} naming a cycle, if the steps' `after` lists draw one."""
    index = {step.ref: i for i, step in enumerate(steps)}
    state = [0] * len(steps)  # 0 unseen, 1 on the path, 2 done
    for start in range(len(steps)):
        if state[start]:
            continue
        # Depth first without recursion: (step, next after item to follow).
        path: list[tuple[int, int]] = [(start, 0)]
        state[start] = 1
        while path:
            i, j = path[-1]
            after = steps[i].after
            if j == len(after):
                state[i] = 2
                path.pop()
                continue
            path[-1] = (i, j + 1)
            k = index[after[j]]
            if state[k] == 1:
                on_path = [p for p, _ in path]
                return _named(steps, on_path[on_path.index(k) :])
            if state[k] == 0:
                state[k] = 1
                path.append((k, 0))
    return {}
