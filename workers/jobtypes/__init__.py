"""Job type handlers: one module per type in this package, found on first use of REGISTRY.

A module here (not starting with "_") defines `JOB_TYPE = JobType(SPEC, run)`: the type's
contract (contract/jobtypes/<name>.py: name, payload schema, description, sample) and the
function that does the work. The payload is validated with the contract's schema, defaults
filled in, before `run` sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from contract.jobtypes import WHOLE_PAYLOAD, InvalidPayloadError, JobSpec
from contract.registry import Registry as _Registry
from contract.registry import add as _add
from contract.registry import discover as _discover

__all__ = [
    "REGISTRY",
    "WHOLE_PAYLOAD",
    "InvalidPayloadError",
    "JobType",
    "JobTypeLike",
    "Registry",
    "discover",
    "register",
]


class JobTypeLike(Protocol):
    """What a registered job type offers the worker."""

    def handler(self, payload: Any) -> Any:
        """Run one job; the return value becomes the ack's result."""
        ...


@dataclass(frozen=True)
class JobType:
    """A contract's job type and the function that runs it: `run(validated payload)`, or with
    `with_job`, `run(validated payload, job)`: the workers.job.Job it reports progress and
    saves checkpoints with, and whose `checkpoint` says where an earlier attempt got to."""

    spec: JobSpec
    run: Callable[..., Any]
    with_job: bool = False

    @property
    def name(self) -> str:
        """The contract's name of the type."""
        return self.spec.name

    @property
    def description(self) -> str:
        """The contract's one-line description."""
        return self.spec.description

    def sample(self, broker_url: str) -> dict[str, Any]:
        """The contract's sample payload."""
        return self.spec.sample(broker_url)

    def parse(self, payload: Any) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
        """(validated payload with defaults, {}) or (None, {field: [messages]})."""
        return self.spec.parse(payload)

    def handler(self, payload: Any, job: Any = None) -> Any:
        """Validate (filling defaults) and run; raises InvalidPayloadError on a bad payload.

        A type `with_job` gets `job` (a workers.job.Job; a bare one, reporting nowhere, when
        called without).
        """
        data = self.spec.check(payload)
        if not self.with_job:
            return self.run(data)
        if job is None:
            from workers.job import Job

            job = Job.bare(payload)
        return self.run(data, job)


J = TypeVar("J", bound=JobTypeLike)


class Registry(_Registry[JobTypeLike]):
    """name → job type, from the modules of a package declaring JOB_TYPE = JobType(...)."""

    attr = "JOB_TYPE"
    kind = JobType


def discover(package: str, path: Any) -> list[tuple[str, Any]]:
    """Import every public module of package and collect its JOB_TYPE, sorted by module name."""
    return _discover(package, path, Registry.attr, Registry.kind)


REGISTRY: Registry = Registry(__name__, __path__)


def register(name: str, jobtype: J) -> J:
    """Register jobtype under name and return it; raises ValueError if name is already taken."""
    _add(REGISTRY, name, jobtype)
    return jobtype
