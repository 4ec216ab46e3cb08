"""`StoreOffers`: each step, every scheduled or just-finished request offers the chunks it
has computed, allocated and keyed but not offered yet, and gets one store job.

How far a request has computed: its computed tokens plus those scheduled this step; an aborted
request's computed tokens; a finished request's tokens but the last sampled one (its KV is
never computed). Prompt tokens only by default. The manager picks slots and may evict; when it
cannot make room the offer is refused whole and made again next step. A chunk of several GPU
blocks is offered by its last block, and copied whole.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

from impl.connector.offloading.job_book import JobBook
from impl.connector.offloading.jobs import GPUBlocks, JobStatus, TransferJob
from impl.connector.offloading.keys import OffloadKey
from impl.connector.offloading.request_state import GroupShape
from impl.connector.types import OffloadingSettings

if TYPE_CHECKING:
    from impl.sched.output import SchedulerOutput


class StoreOffers(JobBook):
    settings: OffloadingSettings
    shapes: tuple[GroupShape, ...]
    blocks_per_chunk: int

    def _store_jobs(self, output: SchedulerOutput) -> dict[int, TransferJob]:
        jobs: dict[int, TransferJob] = {}
        per_chunk = self.blocks_per_chunk
        scheduled = output.num_scheduled_tokens
        for req_id in chain(scheduled, output.finished_req_ids):
            state = self.requests.get(req_id)
            if state is None:
                continue
            request = state.request
            if request.is_finished() and request.get_finished_reason() == "abort":
                num_tokens = request.num_computed_tokens
            elif request.is_finished():
                # The last sampled token's KV is never computed: a chunk ending there is not.
                num_tokens = max(request.num_prompt_tokens, request.num_tokens - 1)
            else:
                num_tokens = request.num_computed_tokens + scheduled[req_id]
            num_tokens = min(num_tokens, request.num_tokens)
            if self.settings.offload_prompt_only:
                num_tokens = min(num_tokens, request.num_prompt_tokens)
            offered: list[OffloadKey] = []
            ranges: list[tuple[int, int]] = []
            for shape, group in zip(self.shapes, state.groups, strict=True):
                start = group.next_stored_chunk
                end = state.storable_chunks(shape, group, num_tokens, per_chunk)
                ranges.append((start, end))
                if end > start:
                    last_blocks = group.block_ids[start * per_chunk + per_chunk - 1:
                                                  end * per_chunk:per_chunk]
                    offered.extend(key for key, block_id in zip(group.keys[start:end],
                                                                last_blocks, strict=True)
                                   if block_id != 0)
            if not offered:
                state.advance_stored(self.shapes, num_tokens, per_chunk)
                continue
            plan = self.manager.prepare_store(offered, state.context)
            if plan is None:
                continue  # no room: offered again next step
            if not plan.keys:
                state.advance_stored(self.shapes, num_tokens, per_chunk)
                continue
            to_store = set(plan.keys)
            block_ids: list[int] = []
            sizes: list[int] = []
            starts: list[int] = []
            for group, (start, end) in zip(state.groups, ranges, strict=True):
                first: int | None = None
                count = 0
                for chunk, key in enumerate(group.keys[start:end], start):
                    if key not in to_store:
                        continue
                    for index in range(chunk * per_chunk, (chunk + 1) * per_chunk):
                        if group.block_ids[index] == 0:
                            continue
                        if first is None:
                            first = index
                        block_ids.append(group.block_ids[index])
                        count += 1
                sizes.append(count)
                starts.append(first or 0)
                group.next_stored_chunk = max(group.next_stored_chunk, end)
            job_id = self._new_job_id()
            state.jobs.add(job_id)
            self.jobs[job_id] = JobStatus(req_id, 1, to_store, is_store=True,
                                          deferred_fence=tuple(block_ids))
            jobs[job_id] = TransferJob(req_id, GPUBlocks(tuple(block_ids), tuple(sizes),
                                                         tuple(starts)), plan.chunk_ids)
            if request.is_finished():
                for block_id in block_ids:
                    self.watched_blocks.setdefault(block_id, set()).add(job_id)
                    if block_id in self.batch_allocated:
                        self.batch_flush.add(job_id)
        return jobs

