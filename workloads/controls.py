"""Operations between steps: what an engine's operator does to the scheduler mid-run.

An RLHF loop resets the prefix cache after new weights land (and the encoder cache, whose
embeddings are stale too); a deployment pauses the scheduler to drain it (`pause` "new": no
new admissions, requests already running or holding KV continue; "all": nothing is scheduled)
and resumes it. A `control` record applies one such operation just before the step `step` is
scheduled, after that step's arrivals and aborts, as the engine core does between steps.

`reset_prefix_cache` succeeds only while no block is in use; `preempt_running` first preempts
every running request (upstream's `reset_running_requests`), so it always succeeds;
`reset_connector` also resets the KV connector's cache (upstream's `reset_connector`: the
OffloadingConnector forgets every chunk; a connector without a cache of its own has nothing to
forget), and the reset succeeds only if both do. Whether a reset succeeded is observable and
compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from workloads.errors import WorkloadError

Action = Literal["reset_prefix_cache", "reset_encoder_cache", "pause", "unpause"]
PauseMode = Literal["new", "all"]
ACTIONS: tuple[str, ...] = ("reset_prefix_cache", "reset_encoder_cache", "pause", "unpause")


@dataclass(frozen=True, slots=True)
class ControlSpec:
    """One operation at `step`; `preempt_running` and `reset_connector` only for
    `reset_prefix_cache`, `mode` only (and always) for `pause`."""

    step: int
    action: Action
    preempt_running: bool = False
    mode: PauseMode | None = None
    reset_connector: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"type": "control", "step": self.step, "action": self.action,
                **({"preempt_running": True} if self.preempt_running else {}),
                **({"reset_connector": True} if self.reset_connector else {}),
                **({"mode": self.mode} if self.mode is not None else {})}


def check_controls(controls: Sequence[tuple[int, ControlSpec]],
                   fail: Callable[[int, str, str], WorkloadError]) -> tuple[ControlSpec, ...]:
    """The controls in step order (file order within a step), or `fail(line, field, problem)`
    for one that cannot be meant: fields of another action, or a pause never lifted (the run
    would wait forever)."""
    for line, control in controls:
        for field, value in (("preempt_running", control.preempt_running),
                             ("reset_connector", control.reset_connector)):
            if value and control.action != "reset_prefix_cache":
                raise fail(line, field, f"only for 'reset_prefix_cache', not "
                           f"{control.action!r}")
        if (control.mode is not None) != (control.action == "pause"):
            verb = "needs" if control.action == "pause" else "must not set"
            raise fail(line, "mode", f"{control.action!r} {verb} 'mode' ('new' or 'all')")
    ordered = sorted(controls, key=lambda item: item[1].step)
    paused_on: int | None = None
    for line, control in ordered:
        if control.action == "pause":
            paused_on = line if paused_on is None else paused_on
        elif control.action == "unpause":
            paused_on = None
    if paused_on is not None:
        raise fail(paused_on, "action", "a pause with no later 'unpause': the requests it "
                   "holds back would never finish")
    return tuple(control for _, control in ordered)
