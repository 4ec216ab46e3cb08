"""What a `System` may do beyond the protocol: operations only some workloads need.

A system without one of these methods runs every workload that does not need it; one that does
gets a clear line naming the system and what the workload asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

from conformance.systems.protocol import Scheduled
from vtwin.errors import UserError
from workloads.controls import ControlSpec


def apply_control(system: object, control: ControlSpec) -> bool | None:
    """Apply an operation between steps (`workloads.controls`): the result of a
    `reset_prefix_cache`, None for the others. `control()` is optional, like `close()`: a
    system without it runs every workload that has no control records."""
    method = getattr(system, "control", None)
    if not callable(method):
        raise UserError(f"{getattr(system, 'name', type(system).__name__)} has no control() "
                        f"method: it cannot apply the workload's {control.action!r} at step "
                        f"{control.step}")
    result: bool | None = method(control)
    return result


def compile_grammar(system: object, request_id: str, failed: bool) -> None:
    """The engine finished compiling `request_id`'s grammar (`failed`: compiling raised).
    Optional like `control()`: a system without it runs every workload without grammars."""
    method = getattr(system, "compile_grammar", None)
    if not callable(method):
        raise UserError(f"{getattr(system, 'name', type(system).__name__)} has no "
                        f"compile_grammar() method: it cannot run request {request_id!r}'s "
                        "grammar (structured output)")
    method(request_id, failed)


def resolve_deferred(system: object, scheduled: Scheduled,
                     drafts: Sequence[tuple[str, Sequence[int]]]) -> Scheduled:
    """Async scheduling with structured output: the step `scheduled` waited for the step before
    it (`Scheduled.pending_grammar`); give it the drafter's tokens and make its bitmask."""
    method = getattr(system, "resolve_deferred", None)
    if not callable(method):
        raise UserError(f"{getattr(system, 'name', type(system).__name__)} has no "
                        "resolve_deferred() method: it cannot run structured output under "
                        "async scheduling")
    result: Scheduled = method(scheduled, drafts)
    return result


def throttle_prefills(system: object, throttled: bool) -> None:
    """A data-parallel engine core's word for the next `schedule()`: keep prefill out of it
    (`throttled`) or not (`workloads.model.EngineConfig.data_parallel`)."""
    method = getattr(system, "throttle_prefills", None)
    if not callable(method):
        raise UserError(f"{getattr(system, 'name', type(system).__name__)} has no "
                        "throttle_prefills() method: it cannot run as a data-parallel rank")
    method(throttled)
