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
from dataclasses import dataclass
from typing import Any

from vtwin.errors import ReleaseCheckFailed


@dataclass(frozen=True, slots=True)
class UpstreamCheck:
    """How upstream stops on a check: the exception it raises and fragments of the source
    line that raises it (any one identifies it)."""

    lines: tuple[str, ...]
    raises: str = "AssertionError"


UPSTREAM_CHECKS: Mapping[str, UpstreamCheck] = {
    "lora-limit": UpstreamCheck(("len(scheduled_loras) <= self.lora_config.max_loras",)),
    "empty-admission": UpstreamCheck(("assert num_new_tokens > 0",)),
    "offloading-reset-mid-step": UpstreamCheck((
        "assert not self._current_batch_load_jobs",
        "assert not self._current_batch_jobs_to_flush",
        "assert not self._current_batch_allocated_block_ids")),
    # A sliding window's store fencing one GPU block twice (the window handed a freed block
    # back to the same request, and the connector's mirror of the block table still holds
    # it at the old place): the store's completion unwatches the block twice. Upstream's
    # KeyError comes from the map when no job watches the block any more, from the job's set
    # when another job still does.
    # A connector reporting failed blocks (NIXL does where every group is full attention to
    # it, e.g. a reference window beside full attention) on a model of several groups.
    "block-level-failures-multi-group": UpstreamCheck(
        ("A KV connector reported block-level load failures",), raises="RuntimeError"),
    "offloading-fence-twice": UpstreamCheck(
        ("pending = self._block_id_to_pending_jobs[bid]", "pending.remove(job_id)"),
        raises="KeyError"),
    # A request reporting its KV events in full mode whose sub-block hit ends inside the
    # prompt's last, partial block: the reused-block events index past the block hashes.
    "reused-events-partial-block": UpstreamCheck(
        ("cached_hashes.append(maybe_convert_block_hash(block_hashes[i]))",),
        raises="IndexError"),
    # A mamba partial tail on the OffloadingConnector (hashes finer than the block, chunks of
    # one block) whose boundary lies past the request's own max_offload_tokens: the store
    # asserts the boundary is within what the request may offload instead of skipping it.
    "offloading-partial-tail-past-cap": UpstreamCheck(("assert boundary <= max_boundary",)),
    # The CPU offload tier with KV events on, hashes finer than the block: a request
    # finishing on max_tokens with drafts scheduled past its last token has its last block
    # confirmed; capturing that block's sub-block payloads indexes past the request's hashes.
    "cpu-event-hashes-past-request": UpstreamCheck(
        ("request.block_hashes[hash_idx], g",), raises="IndexError"),
    # Under DCP, a request reporting its KV events in full mode that hits: the reused-block
    # events view the scheduler-block hashes at the per-rank block size.
    "dcp-reused-block-events": UpstreamCheck(("assert block_size % hash_block_size == 0",)),
    # 0.33's sync loads beside a mamba 'align' group: the allocation that adopts the loaded
    # hit also schedules new tokens, the count allows one new state block per call and the
    # call takes two (the hit's and the new one's); on a pool that tight the pool runs dry.
    "sync-load-blocks-undercounted": UpstreamCheck(
        ("Cannot get {num_blocks} free blocks from the pool",), raises="ValueError"),
}
"""Check name -> how upstream stops on it."""

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
    return next((check for check, upstream in UPSTREAM_CHECKS.items()
                 if upstream.raises in text and any(line in text for line in upstream.lines)),
                None)


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
    known = UPSTREAM_CHECKS.get(check)
    if known is None:
        stops = "upstream stops on it"
    else:
        lines = " or ".join(f"`{line}`" for line in known.lines)
        stops = (f"upstream asserts {lines}" if known.raises == "AssertionError"
                 else f"upstream raises {known.raises} at {lines}")
    return (f"both systems stop at step {step} on release check {check!r}: {stops}, and the "
            "twin reproduces the bug")
