"""When the scheduler's freed blocks go back to the pool: now, or after the step in flight.

With overlapping steps (async scheduling) and a KV connector, a consumer connector could load
into blocks that a step still in flight writes, so a request's freed blocks return to the pool
only once every step that scheduled it has been processed (`deferred_frees`, fenced by step
sequence numbers). The copy-on-write pairs of sub-block hits (`impl.core.partial_hits`) hold
both ends until the step that runs the copy: freed at once, or fenced the same way.
"""

from __future__ import annotations

from mypy_extensions import trait

from impl.sched.output import SchedulerOutput
from impl.sched.request import Request
from impl.sched.state import SchedulerState


@trait
class BlockFrees(SchedulerState):
    def _request_blocks_can_be_freed(self, request: Request) -> bool:
        """Whether no step in flight still writes the request's blocks (always, unless frees
        are deferred)."""
        return not self.defer_block_free or request.last_sched_seq <= self.processed_step_seq

    def _free_request_blocks(self, request: Request) -> None:
        """Free a request's blocks now, or once the steps still writing them are processed."""
        if self._request_blocks_can_be_freed(request):
            self.kv_cache_manager.free(request)
            return
        blocks = self.kv_cache_manager.pop_blocks_for_free(request)
        if blocks:
            self.deferred_frees.append((self.sched_step_seq, blocks))

    def _issue_block_copies(self, output: SchedulerOutput) -> None:
        """Put the step's copy-on-write pairs into its output and drop the references that
        kept both ends alive: now, or once this step is processed when frees are deferred
        (the copy runs with the step)."""
        pairs = self.kv_cache_manager.take_block_copies()
        if not pairs:
            return
        output.kv_cache_block_copies = [(source.block_id, copy.block_id)
                                        for source, copy in pairs]
        retained = [block for pair in pairs for block in pair]
        fence = self.sched_step_seq + 1
        if not self.defer_block_free or fence <= self.processed_step_seq:
            self.kv_cache_manager.block_pool.free_blocks(retained)
        else:
            self.deferred_frees.append((fence, retained[::-1]))

    def _drain_deferred_frees(self) -> None:
        pool = self.kv_cache_manager.block_pool
        while self.deferred_frees and self.deferred_frees[0][0] <= self.processed_step_seq:
            _, blocks = self.deferred_frees.popleft()
            pool.free_blocks(reversed(blocks))
