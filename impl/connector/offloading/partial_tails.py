"""Mamba partial tails on the OffloadingConnector: a state that ends inside a block.

Why: beside a mamba 'align' group hashed finer than its block (`impl.core.partial_hits`),
a prompt's last reusable state usually ends inside a block. The GPU cache keeps it under the
hash of that boundary; without this the CPU tier would only ever hold states at whole chunks,
and a resend whose GPU copy was evicted would recompute up to a block it could have loaded.

What happens, as upstream does it (0.32 and 0.33):

* **Store.** The request that produced the tail overwrites its state block on its next step,
  so the cache preserves the tail in a copy (copy-on-write) and offers that copy
  (`MambaAlignManager._copy_partial_state`, a `BoundaryState` whose boundary is not a
  multiple of the block). One store job stores the boundary under its hash in every group:
  the mamba group from the copy, the others from the block of the request's table the
  boundary falls in (`_partial_tail_store_jobs`). Every block it reads is watched.
* **Lookup.** Past the whole chunks a request hits, the rightmost hash boundary inside the
  next block that every group holds readable is a hit too (`Lookups._partial_tail`), loaded
  like a chunk: the chunk the boundary falls in is read under the boundary's keys instead.
* **Admission.** The scheduler asks the connector about a hit cut to whole blocks; a CPU hit
  longer than the local sub-block tail replaces it (the shared block is loaded, not copied),
  a shorter one is dropped (`impl.sched.admission`).

Only where one boundary names every group's source: chunks of one block, every group's block
the same size, no window but mamba's (`partial_tail_tokens`). A request's `max_offload_tokens`
below its tail's boundary stops upstream on an assertion; the twin stops alike
(`ReleaseCheckFailed('offloading-partial-tail-past-cap')`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.connector.offloading.events import ConnectorEvents
from impl.connector.offloading.job_book import JobBook
from impl.connector.offloading.jobs import GPUBlocks, JobStatus, TransferJob
from impl.connector.offloading.request_state import GroupShape
from impl.core.specs import MambaSpec
from vtwin.errors import ReleaseCheckFailed

if TYPE_CHECKING:
    from impl.core.mamba_boundaries import BoundaryState
    from impl.sched.output import SchedulerOutput


def _is_mamba_align(shape: GroupShape) -> bool:
    return isinstance(shape.spec, MambaSpec) and shape.spec.mamba_cache_mode == "align"


def partial_tail_tokens(shapes: tuple[GroupShape, ...], blocks_per_chunk: int,
                        hash_block_size: int) -> int:
    """The block a partial tail ends inside, in tokens; 0 where partial tails are off: unless
    chunks are one block, every group's block is one size, a mamba 'align' group is hashed
    finer than its block, and no group but mamba has a window."""
    if (blocks_per_chunk != 1 or len({shape.tokens_per_block for shape in shapes}) != 1
            or not any(_is_mamba_align(shape) and shape.tokens_per_block > hash_block_size
                       for shape in shapes)
            or any(shape.window is not None and not _is_mamba_align(shape)
                   for shape in shapes)):
        return 0
    return shapes[0].tokens_per_block


class PartialTails(JobBook):
    shapes: tuple[GroupShape, ...]
    partial_tail_tokens: int
    events: ConnectorEvents

    def _partial_tail_store_jobs(self, output: SchedulerOutput) -> dict[int, TransferJob]:
        """One store job per request that offered a partial tail this step (see the module
        docstring), with the groups whose boundary key the manager accepts."""
        jobs: dict[int, TransferJob] = {}
        block = self.partial_tail_tokens
        by_request: dict[str, list[BoundaryState]] = {}
        for offer in output.boundary_states:
            if offer.boundary % block:
                by_request.setdefault(offer.request_id, []).append(offer)
        for req_id, offers in by_request.items():
            state = self.requests[req_id]
            request = state.request
            boundary = offers[0].boundary
            limits = request.offload_limits
            cap = None if limits is None else limits.max_offload_tokens
            if boundary > min(request.num_prompt_tokens, cap or request.num_prompt_tokens):
                raise ReleaseCheckFailed("offloading-partial-tail-past-cap", (
                    f"{req_id}'s partial tail at {boundary} tokens lies past what it may "
                    f"offload (max_offload_tokens {cap})"))
            copies = {offer.group: offer.block_id for offer in offers}
            index = boundary // block
            if any(not _is_mamba_align(shape) and index >= len(group.block_ids)
                   for shape, group in zip(self.shapes, state.groups, strict=True)):
                continue  # the table does not reach the boundary's block yet
            keys = [state.chunk_key(shape, boundary) for shape in self.shapes]
            sources = [copies[shape.group] if _is_mamba_align(shape)
                       else group.block_ids[index]
                       for shape, group in zip(self.shapes, state.groups, strict=True)]
            plan = self.manager.prepare_store(keys, state.context)
            if plan is None or not plan.keys:
                continue
            accepted = [keys.index(key) for key in plan.keys]
            for shape, key in zip(self.shapes, keys, strict=True):
                if key in plan.keys:
                    self.events.record_partial(request, shape, boundary, key, lookup=False)
            sizes = [0] * len(self.shapes)
            starts = [0] * len(self.shapes)
            for group_index in accepted:
                sizes[group_index] = 1
                starts[group_index] = index
            blocks = tuple(sources[group_index] for group_index in accepted)
            job_id = self._new_job_id()
            state.jobs.add(job_id)
            for block_id in blocks:
                self.watched_blocks.setdefault(block_id, set()).add(job_id)
            self.jobs[job_id] = JobStatus(req_id, 1, set(plan.keys), is_store=True,
                                          fence=blocks)
            jobs[job_id] = TransferJob(req_id, GPUBlocks(blocks, tuple(sizes), tuple(starts)),
                                       plan.chunk_ids)
        return jobs
