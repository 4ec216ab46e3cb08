"""A Hypothesis state machine that drives two offloading managers with the calls the
OffloadingConnector's scheduler side makes, and compares every answer.

Requests walk prompts made of shared chains of block hashes (so they hit each other's chunks),
with one key per KV-cache group per block. The rules: a request arrives (its token positions
known up front, learnt as it goes, or never), looks its prompt up, loads a run of readable
chunks, touches chunks, offers a range of blocks for storing, completes loads and stores (a
store may fail), finishes; the cache is reset. After every rule the two managers' events,
stats and catalogues (every key's slot, readers and readiness) must agree, and the twin's
`check_integrity()` must hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from conformance.offloading.systems import ManagerShape, OffloadManagerSystem

CHAINS = 3
CHAIN_BLOCKS = 10
BLOCK_TOKENS = 16
POSITIONS = ("upfront", "as_offered", "never")


def block_key(chain: int, block: int, group: int) -> bytes:
    """The offload key of block `block` of chain `chain` in group `group`."""
    return bytes([chain, block]) * 4 + group.to_bytes(4, "big")


@dataclass(slots=True)
class ModelRequest:
    request_id: str
    chain: int
    num_blocks: int
    positions: str
    finished: bool = False
    loads: list[list[bytes]] = field(default_factory=list)


class OffloadLockstepMachine(RuleBasedStateMachine):
    shape: ManagerShape

    def __init__(self) -> None:
        super().__init__()
        self.left: OffloadManagerSystem = self.make_left()
        self.right: OffloadManagerSystem = self.make_right()
        self.requests: dict[str, ModelRequest] = {}
        self.stores: list[tuple[str, list[bytes]]] = []
        self.universe = [block_key(c, b, g) for c in range(CHAINS)
                         for b in range(CHAIN_BLOCKS) for g in range(self.shape.groups)]

    def make_left(self) -> OffloadManagerSystem:
        raise NotImplementedError

    def make_right(self) -> OffloadManagerSystem:
        raise NotImplementedError

    def both(self, op: str, *args: Any) -> Any:
        note(f"{op}{args}")
        left = getattr(self.left, op)(*args)
        right = getattr(self.right, op)(*args)
        assert left == right, (f"{op}{args}: {self.left.name} returned {left}, "
                               f"{self.right.name} returned {right}")
        return left

    # -- the requests --------------------------------------------------------------------
    def keys_of(self, request: ModelRequest, start: int, count: int) -> list[bytes]:
        end = min(request.num_blocks, start + count)
        return [block_key(request.chain, b, g) for b in range(start, end)
                for g in range(self.shape.groups)]

    def learn_positions(self, request: ModelRequest, keys: list[bytes]) -> None:
        if request.positions == "as_offered":
            for key in keys:
                self.both("set_position", request.request_id, key,
                          (key[1] + 1) * BLOCK_TOKENS)

    def live(self) -> list[ModelRequest]:
        return [r for r in self.requests.values() if not r.finished]

    def pick(self, data: st.DataObject, live: bool = True) -> ModelRequest:
        pool = self.live() if live else list(self.requests.values())
        return data.draw(st.sampled_from(sorted(pool, key=lambda r: r.request_id)))

    @precondition(lambda self: len(self.live()) < 6)
    @rule(chain=st.integers(0, CHAINS - 1), num_blocks=st.integers(1, CHAIN_BLOCKS),
          positions=st.sampled_from(POSITIONS))
    def add_request(self, chain: int, num_blocks: int, positions: str) -> None:
        request_id = f"r{len(self.requests)}"
        request = ModelRequest(request_id, chain, num_blocks, positions)
        self.requests[request_id] = request
        self.both("new_request", request_id)
        if positions == "upfront":
            for key in self.keys_of(request, 0, num_blocks):
                self.both("set_position", request_id, key, (key[1] + 1) * BLOCK_TOKENS)

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def lookup_prompt(self, data: st.DataObject) -> None:
        request = self.pick(data)
        for key in self.keys_of(request, 0, request.num_blocks):
            if self.both("lookup", key) != "hit":
                break

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data(), count=st.integers(1, 6),
          done=st.booleans())
    def load(self, data: st.DataObject, count: int, done: bool) -> None:
        """Pin the readable chunks of a range; `done`: the load completes at once."""
        request = self.pick(data)
        start = data.draw(st.integers(0, request.num_blocks - 1))
        keys = [key for key in self.keys_of(request, start, count)
                if self.left.lookup(key) == "hit"]
        if keys:
            self.learn_positions(request, keys)
            self.both("prepare_load", request.request_id, keys)
            if done:
                self.both("complete_load", request.request_id, keys)
            else:
                request.loads.append(keys)

    @precondition(lambda self: any(r.loads for r in self.requests.values()))
    @rule(data=st.data())
    def complete_load(self, data: st.DataObject) -> None:
        request = data.draw(st.sampled_from(
            sorted((r for r in self.requests.values() if r.loads), key=lambda r: r.request_id)))
        keys = request.loads.pop(data.draw(st.integers(0, len(request.loads) - 1)))
        self.both("complete_load", request.request_id, keys)

    @precondition(lambda self: bool(self.requests))
    @rule(data=st.data(), count=st.integers(1, 6))
    def touch(self, data: st.DataObject, count: int) -> None:
        request = self.pick(data, live=False)
        start = data.draw(st.integers(0, request.num_blocks - 1))
        self.both("touch", request.request_id, self.keys_of(request, start, count))

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data(), count=st.integers(1, 4),
          done=st.booleans())
    def store(self, data: st.DataObject, count: int, done: bool) -> None:
        """Offer a range for storing; `done`: the store completes at once (successfully)."""
        request = self.pick(data)
        start = data.draw(st.integers(0, request.num_blocks - 1))
        keys = self.keys_of(request, start, count)
        self.learn_positions(request, keys)
        answer = self.both("prepare_store", request.request_id, keys)
        if answer is None or not answer[0]:
            return
        if done:
            self.both("complete_store", request.request_id, list(answer[0]), True)
        else:
            self.stores.append((request.request_id, list(answer[0])))

    @precondition(lambda self: bool(self.stores))
    @rule(data=st.data(), success=st.sampled_from([True, True, True, False]))
    def complete_store(self, data: st.DataObject, success: bool) -> None:
        request_id, keys = self.stores.pop(data.draw(st.integers(0, len(self.stores) - 1)))
        self.both("complete_store", request_id, keys, success)

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        request = self.pick(data)
        request.finished = True
        self.both("finish", request.request_id)

    @rule()
    def reset_cache(self) -> None:
        """Upstream's connector never completes a job started before a reset."""
        self.both("reset_cache")
        self.stores.clear()
        for request in self.requests.values():
            request.loads.clear()

    # -- what must agree after every rule -----------------------------------------------
    @invariant()
    def integrity(self) -> None:
        self.left.check_integrity()
        self.right.check_integrity()

    @invariant()
    def events_agree(self) -> None:
        self.both("take_events")

    @invariant()
    def stats_agree(self) -> None:
        self.both("stats")

    @invariant()
    def policy_orders_agree(self) -> None:
        self.both("policy_order")

    @invariant()
    def catalogues_agree(self) -> None:
        self.both("catalogue", self.universe)


SystemFactory = Callable[[ManagerShape], OffloadManagerSystem]


def lockstep_machine(shape: ManagerShape, make_left: SystemFactory,
                     make_right: SystemFactory) -> type[OffloadLockstepMachine]:
    """A machine class for `shape`, comparing `make_left(shape)` with `make_right(shape)`."""

    class Machine(OffloadLockstepMachine):
        def make_left(self) -> OffloadManagerSystem:
            return make_left(self.shape)

        def make_right(self) -> OffloadManagerSystem:
            return make_right(self.shape)

    Machine.shape = shape
    Machine.__name__ = f"OffloadLockstep_{shape.name}"
    return Machine


SHAPES = (
    ManagerShape("lru", num_chunks=6, policy="lru"),
    ManagerShape("arc", num_chunks=6, policy="arc"),
    ManagerShape("lru_tiny", num_chunks=3, policy="lru"),
    ManagerShape("arc_tiny", num_chunks=3, policy="arc"),
    ManagerShape("lru_threshold", num_chunks=8, policy="lru", store_threshold=2,
                 max_tracker_size=6),
    ManagerShape("arc_threshold", num_chunks=8, policy="arc", store_threshold=3,
                 max_tracker_size=5),
    ManagerShape("lru_two_groups", num_chunks=10, policy="lru", groups=2),
    ManagerShape("arc_two_groups", num_chunks=10, policy="arc", groups=2),
)
