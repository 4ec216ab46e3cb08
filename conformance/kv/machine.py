"""A Hypothesis state machine that drives two `KVSystem`s with the same scheduler-like operations.

Operations mirror how a scheduler uses the KV-cache manager: admit a waiting request (prefix
lookup, then allocation of its first chunk), run a running request one more chunk or one decode
token (with spec-decode lookahead), finish or preempt a request, reset the prefix cache. After
every operation both systems' return values must agree, and each observable of their snapshots
is its own invariant (free count, free-queue order, cached set, block tables, block hashes,
stats), so a failure names the property. Messages label each side by its system's `name`: an
impl-vs-impl run must not blame "upstream".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from conformance.kv.family import KVFamily
from conformance.kv.holes import HoleRules
from conformance.kv.systems import KVSystem, Snapshot


@dataclass(slots=True)
class ModelRequest:
    request_id: str
    num_tokens: int
    num_computed: int = 0
    running: bool = False
    outputs: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # the prompt and every appended token


def shared_prefixes(block_size: int) -> list[list[int]]:
    """A few prompt prefixes, block-aligned and not, that requests share."""
    return [
        [],
        [1000 + i for i in range(block_size * 2)],
        [2000 + i for i in range(block_size * 3 + block_size // 2)],
        [3000 + i for i in range(block_size * 5)],
    ]


def decode_token(request_id: str, position: int) -> int:
    return (int(request_id[1:]) * 31 + position * 7) % 97


class KVLockstepMachine(HoleRules, RuleBasedStateMachine):
    family: KVFamily

    def __init__(self) -> None:
        super().__init__()
        from impl.core.hashing import make_none_hash

        none_hash = make_none_hash(self.family.hash_algo, "0")
        self.left: KVSystem = self.make_left(none_hash)
        self.right: KVSystem = self.make_right(none_hash)
        self.requests: dict[str, ModelRequest] = {}
        self.next_id = 0
        self.prefixes = shared_prefixes(self.family.scheduler_block_sizes[0])
        self.finished_tokens: list[list[int]] = []  # the last few finished requests' tokens
        self._version = 0
        self._snapshot_version = -1
        self._snapshot_pair: tuple[Snapshot, Snapshot] | None = None

    def make_left(self, none_hash: bytes) -> KVSystem:
        raise NotImplementedError

    def make_right(self, none_hash: bytes) -> KVSystem:
        raise NotImplementedError

    def both(self, op: str, *args: Any) -> Any:
        """Run one operation on both systems; their return values must be equal."""
        self._version += 1
        left = getattr(self.left, op)(*args)
        right = getattr(self.right, op)(*args)
        assert left == right, (f"{op}{args}: {self.left.name} returned {left}, "
                               f"{self.right.name} returned {right}")
        return left

    def _pick(self, data: st.DataObject, running: bool) -> ModelRequest:
        ids = sorted(rid for rid, r in self.requests.items() if r.running == running)
        return self.requests[data.draw(st.sampled_from(ids), label="request")]

    def _has(self, running: bool) -> bool:
        return any(r.running == running for r in self.requests.values())

    # -- rules ---------------------------------------------------------------------------
    @precondition(lambda self: len(self.requests) < 12)
    @rule(prefix=st.integers(0, 3), suffix=st.lists(st.integers(0, 40), max_size=40),
          salt=st.sampled_from([None, None, None, "s1"]),
          lora=st.sampled_from([None, None, None, "adapter"]))
    def add_request(self, prefix: int, suffix: list[int], salt: str | None,
                    lora: str | None) -> None:
        tokens = self.prefixes[prefix] + suffix
        if not tokens:
            tokens = [7]
        request_id = f"r{self.next_id}"
        self.next_id += 1
        note(f"add {request_id}: {len(tokens)} tokens (prefix {prefix}, salt {salt}, lora {lora})")
        self.both("add_request", request_id, tokens, salt, lora)
        self.requests[request_id] = ModelRequest(request_id, len(tokens), tokens=list(tokens))

    @precondition(lambda self: len(self.requests) < 12 and bool(
        self.finished_tokens or self.requests))
    @rule(data=st.data(), extra=st.lists(st.integers(0, 40), max_size=20))
    def resubmit(self, data: st.DataObject, extra: list[int]) -> None:
        """A new request repeating a finished or present request's tokens (a retry, the next
        turn of a conversation): hits on long runs of its own blocks, not only on the shared
        prefixes, so holes inside them can be met."""
        sources = [*self.finished_tokens,
                   *(self.requests[rid].tokens for rid in sorted(self.requests))]
        tokens = [*data.draw(st.sampled_from(sources), label="repeated tokens"), *extra]
        request_id = f"r{self.next_id}"
        self.next_id += 1
        note(f"add {request_id}: {len(tokens)} tokens (a repeat, {len(extra)} more)")
        self.both("add_request", request_id, tokens, None, None)
        self.requests[request_id] = ModelRequest(request_id, len(tokens), tokens=tokens)

    @precondition(lambda self: self._has(running=False))
    @rule(data=st.data(), chunk=st.integers(1, 80), lookahead=st.sampled_from([0, 0, 0, 2]),
          must_fit=st.booleans(), delay=st.sampled_from([False, False, False, True]))
    def admit(self, data: st.DataObject, chunk: int, lookahead: int, must_fit: bool,
              delay: bool, request: ModelRequest | None = None) -> None:
        if request is None:
            request = self._pick(data, running=False)
        hit = self.both("get_computed_blocks", request.request_id)
        num_new = min(chunk, request.num_tokens - hit.num_tokens)
        # An encoder-decoder model writes the encoder's output when the request starts.
        encoder = data.draw(st.integers(0, 100), label="encoder tokens") if (
            self.family.has_cross_attention) else 0
        note(f"admit {request.request_id}: hit {hit.num_tokens}, new {num_new}, "
             f"lookahead {lookahead}, full_sequence_must_fit {must_fit}, delay_cache {delay}, "
             f"encoder tokens {encoder}")
        result = self.both("allocate_slots", request.request_id, num_new, lookahead, True,
                           must_fit, delay, encoder)
        self.both("take_block_copies")  # what the step's output carries (sub-block hits)
        if result is not None:
            request.num_computed = hit.num_tokens + num_new
            request.running = True
            self.both("set_num_computed_tokens", request.request_id, request.num_computed)
            if delay:  # the transfer landed: cache what it computed
                note(f"cache_blocks {request.request_id} up to {request.num_computed}")
                self.both("cache_blocks", request.request_id, request.num_computed)

    @precondition(lambda self: self._has(running=True))
    @rule(data=st.data(), chunk=st.integers(1, 64), lookahead=st.sampled_from([0, 0, 0, 2]))
    def run_step(self, data: st.DataObject, chunk: int, lookahead: int,
                 request: ModelRequest | None = None) -> None:
        if request is None:
            request = self._pick(data, running=True)
        if request.num_computed >= request.num_tokens:  # decode: sample one token first
            token = decode_token(request.request_id, request.num_tokens)
            self.both("append_token", request.request_id, token)
            request.tokens.append(token)
            request.num_tokens += 1
        num_new = min(chunk, request.num_tokens - request.num_computed)
        note(f"step {request.request_id}: computed {request.num_computed}, new {num_new}, "
             f"lookahead {lookahead}")
        result = self.both("allocate_slots", request.request_id, num_new, lookahead, False)
        self.both("take_block_copies")
        if result is None:
            note(f"preempt {request.request_id} (no room)")
            self._free(request, preempted=True)
        else:
            request.num_computed += num_new
            self.both("set_num_computed_tokens", request.request_id, request.num_computed)

    @precondition(lambda self: self._has(running=True))
    @rule(data=st.data(), steps=st.integers(2, 12))
    def decode_burst(self, data: st.DataObject, steps: int) -> None:
        """One request decodes `steps` tokens in a row, one per step (a long output without
        other requests in between: where windows over the output open gaps)."""
        request = self._pick(data, running=True)
        for _ in range(steps):
            if request.num_computed < request.num_tokens or not request.running:
                return
            self.run_step(data, 1, 0, request)

    @precondition(lambda self: self._has(running=True))
    @rule(data=st.data(), preempted=st.booleans())
    def finish(self, data: st.DataObject, preempted: bool) -> None:
        request = self._pick(data, running=True)
        note(f"{'preempt' if preempted else 'finish'} {request.request_id}")
        self._free(request, preempted)

    @rule()
    def new_step(self) -> None:
        note("new_step_starts")
        self.both("new_step")

    @rule()
    def reset_prefix_cache(self) -> None:
        note("reset_prefix_cache")
        self.both("reset_prefix_cache")

    def _free(self, request: ModelRequest, preempted: bool) -> None:
        self.both("free", request.request_id, preempted)
        if preempted:
            request.running = False
            request.num_computed = 0
            self.both("set_num_computed_tokens", request.request_id, 0)
        else:
            del self.requests[request.request_id]
            self.finished_tokens = [*self.finished_tokens[-7:], request.tokens]

    # -- agreement: one invariant per observable, so a failure names the property ---------
    def _snapshots(self) -> tuple[Snapshot, Snapshot]:
        """Both snapshots for the current state, taken once per operation.

        Taking a snapshot drains each side's prefix-cache stats, so every invariant must see
        the same pair: they are cached until the next operation goes through `both`.
        """
        if self._snapshot_version != self._version:
            self._snapshot_pair = (self.left.snapshot(), self.right.snapshot())
            self._snapshot_version = self._version
        assert self._snapshot_pair is not None
        return self._snapshot_pair

    def _agree(self, field_name: str) -> None:
        left, right = self._snapshots()
        a, b = getattr(left, field_name), getattr(right, field_name)
        width = max(len(self.left.name), len(self.right.name)) + 1
        assert a == b, (f"{field_name} differs:\n  {self.left.name + ':':<{width}} {a}\n"
                        f"  {self.right.name + ':':<{width}} {b}")

    @invariant()
    def integrity(self) -> None:
        self.left.check_integrity()
        self.right.check_integrity()

    @invariant()
    def free_counts_agree(self) -> None:
        self._agree("num_free_blocks")

    @invariant()
    def free_queue_orders_agree(self) -> None:
        self._agree("free_queue")

    @invariant()
    def cached_sets_agree(self) -> None:
        self._agree("cached")

    @invariant()
    def cached_blocks_agree(self) -> None:
        self._agree("cached_blocks")

    @invariant()
    def block_tables_agree(self) -> None:
        self._agree("tables")

    @invariant()
    def block_hashes_agree(self) -> None:
        self._agree("block_hashes")

    @invariant()
    def stats_agree(self) -> None:
        self._agree("stats")


SystemFactory = Callable[[KVFamily, bytes], KVSystem]


def lockstep_machine(family: KVFamily, make_left: SystemFactory,
                     make_right: SystemFactory) -> type[KVLockstepMachine]:
    """A machine class for one family driving the two given systems (impl vs upstream in the
    differential suite, impl vs impl in the unit suite: one builder for both)."""

    class Machine(KVLockstepMachine):
        def make_left(self, none_hash: bytes) -> KVSystem:
            return make_left(family, none_hash)

        def make_right(self, none_hash: bytes) -> KVSystem:
            return make_right(family, none_hash)

    Machine.family = family
    Machine.__name__ = Machine.__qualname__ = f"KVLockstep_{family.name}"
    return Machine
