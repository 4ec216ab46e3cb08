"""`BlockTables`: the OffloadingConnector's mirror of each request's GPU block table.

A store reads GPU blocks by table position, and the scheduler side never reads the GPU pool:
it follows the block ids each step's output hands out (new requests' whole tables, running
requests' new blocks, a resumed request's table replacing its old one) and notes every block
handed out in the step (`batch_allocated`, copy-on-write copies included), so that a store
still reading a block handed out again is flushed and a windowed group's entries that name
one are blanked.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

from impl.connector.offloading.job_book import JobBook
from impl.connector.offloading.request_state import GroupShape

if TYPE_CHECKING:
    from impl.sched.output import SchedulerOutput


class BlockTables(JobBook):
    shapes: tuple[GroupShape, ...]
    windowed_groups: tuple[int, ...]
    blocks_per_chunk: int

    def _follow_block_tables(self, output: SchedulerOutput) -> None:
        """Mirror the block tables the step hands out (a resumed request's is replaced).

        A windowed group frees blocks that fall out of its window before the request ends,
        and the pool may hand one out again this step: every request's windowed entries not
        stored yet that name a block handed out now are blanked (0), so no store reads it."""
        cached = output.scheduled_cached_reqs
        updates = chain(((new.req_id, new.block_ids, False) for new in output.scheduled_new_reqs),
                        ((req_id, new_ids, req_id in cached.resumed_req_ids)
                         for req_id, new_ids in zip(cached.req_ids, cached.new_block_ids,
                                                    strict=True)))
        windowed = self.windowed_groups
        known_ends: dict[str, list[int]] = {}  # windowed tables' lengths before this step
        for req_id, new_ids, resumed in updates:
            state = self.requests[req_id]
            state.extend_keys(self.shapes)
            if resumed:
                for group in state.groups:
                    group.block_ids.clear()
            if new_ids:
                known_ends[req_id] = [len(state.groups[i].block_ids) for i in windowed]
                for shape, group in zip(self.shapes, state.groups, strict=True):
                    group.block_ids.extend(new_ids[shape.group])
                    self.batch_allocated.update(b for b in new_ids[shape.group] if b != 0)
        # A copy-on-write's copy is a block handed out too (a running request's is in no table).
        self.batch_allocated.update(copy for _, copy in output.kv_cache_block_copies)
        if not windowed or not self.batch_allocated:
            return
        for req_id, state in self.requests.items():
            ends = known_ends.get(req_id)
            for position, index in enumerate(windowed):
                group = state.groups[index]
                end = len(group.block_ids) if ends is None else ends[position]
                for slot in range(group.next_stored_chunk * self.blocks_per_chunk, end):
                    if group.block_ids[slot] in self.batch_allocated:
                        group.block_ids[slot] = 0
