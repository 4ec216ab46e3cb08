"""`ContinuumSettings`: the policy's knobs, in milliseconds of a deterministic clock."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ContinuumSettings:
    """`ttl_ms`: the fixed estimator's prediction and pin time-to-live (the learned one's
    prediction until a job's first gap is seen). `threshold_ms`: predicted tool calls this long
    or longer are not worth a pin (the next turn would find it expired). `step_ms`: the clock,
    one engine step (time is steps times `step_ms`, never wall time, so runs repeat)."""

    ttl_ms: float = 1000.0
    estimator: str = "fixed"  # fixed | learned
    threshold_ms: float = 2000.0
    step_ms: float = 20.0

    def __post_init__(self) -> None:
        for name in ("ttl_ms", "threshold_ms", "step_ms"):
            if not getattr(self, name) > 0:
                raise ValueError(f"continuum.{name}: must be > 0 (got {getattr(self, name)})")
        if self.estimator not in ("fixed", "learned"):
            raise ValueError("continuum.estimator: must be 'fixed' or 'learned' "
                             f"(got {self.estimator!r})")
