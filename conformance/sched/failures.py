"""When two systems stopping with an error is agreement: both stop at the same step, on the same
release check.

Upstream has bugs that end a run with an assertion (`conformance/upstream_bugs/`). The twin
reproduces them: where the release it follows asserts, it raises `ReleaseCheckFailed(check)`
instead of running on (a twin that runs on hides the crash from whoever replays the workload
on it, and would make the generated space steer around a real state). Each check the twin
knows is paired here with the assertion upstream raises for it, found in the assertion's
source line of the traceback (a worker's traceback travels in the exception's notes). Two
errors agree when both name the same check; anything else (an unknown assertion, one side
alone, different checks) stays an error.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping
from typing import Any

from vtwin.errors import ReleaseCheckFailed

UPSTREAM_CHECKS: Mapping[str, tuple[str, ...]] = {
    "lora-limit": ("len(scheduled_loras) <= self.lora_config.max_loras",),
    "empty-admission": ("assert num_new_tokens > 0",),
}
"""Check name -> fragments of upstream's assertion line (any one identifies it)."""

_TWIN_MESSAGE = re.compile(r"release check '([\w-]+)' fails")


def failure_check(err: BaseException) -> str | None:
    """The release check `err` stops on (None: not one the harness knows)."""
    if isinstance(err, ReleaseCheckFailed):
        return err.check
    text = "".join(traceback.format_exception(err, chain=False))  # its own, not a cause
    return check_in_text(text)


def check_in_text(text: str) -> str | None:
    """The release check named in an error's text: the twin's message (also when it crossed
    a worker's pipe as text), else upstream's assertion line."""
    twin = _TWIN_MESSAGE.search(text)
    if twin is not None:
        return twin.group(1)
    if "AssertionError" not in text:
        return None
    return next((check for check, fragments in UPSTREAM_CHECKS.items()
                 if any(fragment in text for fragment in fragments)), None)


def same_failure(left: BaseException | None, right: BaseException | None) -> str | None:
    """The check both errors stop on (None: they do not agree, or one side did not fail)."""
    if left is None or right is None:
        return None
    check = failure_check(left)
    return check if check is not None and check == failure_check(right) else None


def error_end(err: BaseException, steps: int) -> dict[str, Any]:
    """A recorded run's end line for an error: what `same_failed_ends` reads back."""
    end: dict[str, Any] = {"end": "error", "step": steps,
                           "detail": f"{type(err).__name__}: {err}"}
    check = failure_check(err)
    if check is not None:
        end["check"] = check
    return end


def same_failed_ends(left: Mapping[str, Any], right: Mapping[str, Any]) -> str | None:
    """The check two recorded runs both ended on at the same step (None: they did not)."""
    if left.get("end") != "error" or right.get("end") != "error":
        return None
    check = left.get("check")
    if check is None or check != right.get("check") or left.get("step") != right.get("step"):
        return None
    return str(check)


def describe(check: str, step: int) -> str:
    """One line for reports: both systems stopped alike."""
    upstream = " or ".join(f"`{f}`" for f in UPSTREAM_CHECKS.get(check, ()))
    return (f"both systems stop at step {step} on release check {check!r}: upstream asserts "
            f"{upstream or 'it'}, and the twin reproduces the bug")
