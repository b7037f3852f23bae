"""Registry of typed jobs: name -> object whose .handler(payload) runs the job."""

from typing import Any, Protocol, TypeVar


class JobType(Protocol):
    """What a registered job type offers the worker."""

    def handler(self, payload: Any) -> Any:
        """Run one job; the return value becomes the ack's result."""
        ...


J = TypeVar("J", bound=JobType)

REGISTRY: dict[str, JobType] = {}


def register(name: str, jobtype: J) -> J:
    """Register jobtype under name and return it; raises ValueError if name is already taken."""
    if name in REGISTRY and REGISTRY[name] is not jobtype:
        raise ValueError(f"job type already registered: {name}")
    REGISTRY[name] = jobtype
    return jobtype
