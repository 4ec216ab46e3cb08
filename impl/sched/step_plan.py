"""`StepPlan`: what one `schedule()` call has decided so far.

The running phase and the admission phase both add to it; a preemption can take back what an
earlier request of the same step was given (its tokens return to the budget). Built fresh for
every step and dropped once the `SchedulerOutput` is made.
"""

from __future__ import annotations

from dataclasses import dataclass

from impl.core.kv_cache_manager import KVCacheBlocks
from impl.sched.request import Request

EncoderChoice = tuple[list[int], int, int, list[int]]
"""(items to encode, tokens the chunk keeps, encoder budget left, items shared within the
chunk): one request's encoder decision (`impl.sched.encoder_inputs`)."""


@dataclass(slots=True, init=False)
class StepPlan:
    token_budget: int
    scheduled_running: list[Request]
    scheduled_new: list[Request]
    scheduled_resumed: list[Request]
    preempted: list[Request]
    new_blocks_of: dict[str, KVCacheBlocks]
    num_scheduled: dict[str, int]
    spec_tokens: dict[str, list[int]]
    # Whether the step carries prefill: a running request continued its prompt (kept even if
    # it is preempted later in the step), or an admitted one has more than its last token left.
    prefill_scheduled: bool
    prefill_admitted: bool
    # Multimodal: the items each request encodes this step, and the encoder budget left.
    encoder_inputs: dict[str, list[int]]
    encoder_budget: int
    pending_encoder: EncoderChoice  # the request being placed, until it is scheduled
    # A request was admitted with KV loaded within the step (a connector's synchronous load):
    # the worker must finish loading before the forward.
    has_sync_kv_loads: bool

    def __init__(self, token_budget: int, encoder_budget: int = 0) -> None:
        """An empty plan, one per step (`init=False`: this `__init__` compiles, a dataclass's
        would not; see `impl.sched.output`)."""
        self.token_budget = token_budget
        self.scheduled_running = []
        self.scheduled_new = []
        self.scheduled_resumed = []
        self.preempted = []
        self.new_blocks_of = {}
        self.num_scheduled = {}
        self.spec_tokens = {}
        self.prefill_scheduled = False
        self.prefill_admitted = False
        self.encoder_inputs = {}
        self.encoder_budget = encoder_budget
        self.pending_encoder = ([], 0, encoder_budget, [])
        self.has_sync_kv_loads = False

    def schedule(self, request: Request, num_new: int, blocks: KVCacheBlocks) -> None:
        """`request` computes `num_new` tokens this step, into `blocks` (the new ones)."""
        self.new_blocks_of[request.request_id] = blocks
        self.num_scheduled[request.request_id] = num_new
        self.token_budget -= num_new

    def take_back(self, request: Request) -> None:
        """A running request scheduled earlier in this step was preempted: its tokens and the
        encoder budget of its items go back, and it leaves the step's output."""
        self.scheduled_running.remove(request)
        self.token_budget += self.num_scheduled.pop(request.request_id)
        del self.new_blocks_of[request.request_id]
        self.spec_tokens.pop(request.request_id, None)
        encoded = self.encoder_inputs.pop(request.request_id, None)
        if encoded:
            self.encoder_budget += sum(request.get_num_encoder_embeds(i) for i in encoded)

    @property
    def prefill_running(self) -> bool:
        """A running request scheduled this step continues its prefill."""
        return any(r.is_prefill_chunk for r in self.scheduled_running)
