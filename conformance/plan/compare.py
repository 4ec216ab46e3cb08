"""Twin plan against upstream plan: the differences, each named by its path in the plan.

Both sides are run; a refusal is an outcome like any plan. They agree when both plan and the
plans are equal, or when both refuse with the same exception class (upstream's `ValueError` for
a memory shortfall is the twin's `PlanError`, which is a `ValueError`; where upstream asserts,
the twin's error says so in `upstream_class`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from impl.plan import ModelSpec, PlanError, PlanOptions, plan_kv_cache
from impl.plan.render import plan_to_dict


@dataclass(frozen=True, slots=True)
class Outcome:
    """A plan in comparison form, or the refusal: exception class name and message."""

    plan: dict[str, Any] | None = None
    error_class: str | None = None
    message: str = ""


def twin_outcome(model: ModelSpec, memory: int, options: PlanOptions) -> Outcome:
    try:
        return Outcome(plan=plan_to_dict(plan_kv_cache(model, memory, options)))
    except PlanError as err:
        return Outcome(error_class=err.upstream_class, message=str(err))


def upstream_outcome(model: ModelSpec, memory: int, options: PlanOptions) -> Outcome:
    from conformance.plan.upstream import upstream_plan

    try:
        return Outcome(plan=upstream_plan(model, memory, options))
    except Exception as err:  # noqa: BLE001 - any refusal is an outcome to compare
        text = str(err) or repr(err)
        return Outcome(error_class=type(err).__name__, message=text.splitlines()[0])


def differences(twin: Any, upstream: Any, path: str = "") -> list[str]:
    """Every leaf where the two differ, as `path: twin X, upstream Y` (lists by index)."""
    if isinstance(twin, dict) and isinstance(upstream, dict):
        out: list[str] = []
        for key in list(twin) + [k for k in upstream if k not in twin]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in upstream or key not in twin:
                out.append(f"{sub}: only in {'twin' if key in twin else 'upstream'}")
            else:
                out.extend(differences(twin[key], upstream[key], sub))
        return out
    if isinstance(twin, list) and isinstance(upstream, list) and len(twin) == len(upstream):
        return [d for i, (a, b) in enumerate(zip(twin, upstream, strict=True))
                for d in differences(a, b, f"{path}[{i}]")]
    if twin != upstream:
        return [f"{path or '(plan)'}: twin {_short(twin)}, upstream {_short(upstream)}"]
    return []


def outcome_differences(twin: Outcome, upstream: Outcome) -> list[str]:
    if twin.plan is not None and upstream.plan is not None:
        return differences(twin.plan, upstream.plan)
    if twin.plan is None and upstream.plan is None:
        if twin.error_class == upstream.error_class:
            return []
        return [f"refusal: twin {twin.error_class} ({twin.message}), upstream "
                f"{upstream.error_class} ({upstream.message})"]
    refused, planned = ("twin", "upstream") if twin.plan is None else ("upstream", "twin")
    message = twin.message if twin.plan is None else upstream.message
    return [f"refusal: {refused} refuses ({message}), {planned} plans"]


def compare(model: ModelSpec, memory: int, options: PlanOptions,
            upstream: Callable[[ModelSpec, int, PlanOptions], Outcome] | None = None,
            ) -> tuple[Outcome, list[str]]:
    """The twin's outcome and its differences from upstream's (or from `upstream`'s)."""
    ours = twin_outcome(model, memory, options)
    theirs = (upstream or upstream_outcome)(model, memory, options)
    return ours, outcome_differences(ours, theirs)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
