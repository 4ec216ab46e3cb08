"""Operator controls (`workloads.controls`) on a scheduler: the twin's and upstream's share the
method names (`reset_prefix_cache(reset_running_requests=)`, `reset_encoder_cache`,
`set_pause_state`) and the pause states' member names, so one function drives both; each
adapter passes its own `PauseState` enum."""

from __future__ import annotations

from typing import Any

from workloads.controls import ControlSpec


def drive_control(scheduler: Any, control: ControlSpec, pause_states: Any) -> bool | None:
    """Apply `control`: a reset's success, None for the others."""
    if control.action == "reset_prefix_cache":
        return bool(scheduler.reset_prefix_cache(reset_running_requests=control.preempt_running,
                                                 reset_connector=control.reset_connector))
    if control.action == "reset_encoder_cache":
        scheduler.reset_encoder_cache()
    elif control.action == "pause":
        scheduler.set_pause_state(pause_states.PAUSED_ALL if control.mode == "all"
                                  else pause_states.PAUSED_NEW)
    else:
        scheduler.set_pause_state(pause_states.UNPAUSED)
    return None
