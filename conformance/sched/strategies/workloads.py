"""Hypothesis strategies for whole workloads, small enough to run both systems per example.

A generated workload stays within what upstream accepts (prompts fit `max_model_len`, chunked
prefill off needs a budget of at least `max_model_len`, the pool holds one full-length request
per group) but otherwise spans what users configure, not what was convenient:

* KV layouts: full attention alone or with a sliding window (windows smaller than a block, a
  block plus one or two tokens, several blocks), a sliding window alone (every layer slides),
  full attention with chunked local attention or mamba (cache mode 'none' or 'align'), and the
  three-type hybrids full + window + mamba and full + window + chunked; block sizes 16 and 32;
  hash blocks smaller than the block size, hybrids included (with mamba 'align': hits that end
  inside a block and their copy-on-write, `impl.core.partial_hits`);
* budgets at their edges: tiny token budgets, chunked prefill off with the budget exactly
  `max_model_len`, `max_num_seqs` from 1, requests whose prompt + output reach `max_model_len`;
* LoRA adapters (two names, kept across a session's turns): hashes and events per adapter;
* FCFS and priority (tiny pools force preemptions, including of requests already scheduled in
  the same step), EOS / stop / min_tokens / ignore_eos, aborts at any time;
* speculative decoding (uniform padding, drafts to requests still in prefill, EAGLE-style
  lookahead slots) and async scheduling;
* multi-turn sessions: a turn's prompt is the previous turn's prompt plus its output (computed
  with the harness's token model) plus new tokens, so blocks filled by generated tokens are
  hashed and hit later, after evictions that may leave holes in a cached run.

Imported by tests only (it needs Hypothesis).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.sched.strategies.context_parallel import context_parallel_sizes
from conformance.sched.token_model import TokenModel
from workloads.model import (
    AbortSpec,
    EngineConfig,
    KVCacheGroup,
    MambaCacheMode,
    PlanSpec,
    RequestSpec,
    Workload,
)

EOS = 2
STOP = 13
LORAS = (None, None, None, "adapter-a", "adapter-b", "adapter-c")
"""LoRA adapters: their names key the block hashes and KV events; `max_loras` (drawn per
workload, 0 = no limit) makes admission skip a request whose adapter would exceed it."""
LAYOUTS = ("full", "full", "window", "chunked", "mamba", "window+mamba", "window+chunked",
           "window-alone", "reference", "reference-alone", "replay", "window+replay", "ring")
"""KV layouts by the groups they add to full attention ("full" twice: the common case);
"window-alone" is a model whose every layer slides (one sliding-window group, no full one);
"reference" adds a reference sliding window (the prompt kept, the output windowed) and
"reference-alone" is a model of those layers only; "replay" adds a sliding window with
bounded replay (DeepSeek-V4.1: no prefix cache of its own, a hit's last window recomputed);
"ring" a circular buffer (one block per request, no prefix cache)."""


def _window(draw: Any, block_size: int) -> KVCacheGroup:
    # Off-grid windows: w - 1 just past a block boundary (block + 2) changes how many blocks a
    # hit must keep (cdiv(w - 1, block)) from what w - 2 would give.
    size = draw(st.sampled_from((block_size // 2, block_size, block_size + 1, block_size + 2,
                                 2 * block_size + 1, 3 * block_size, 64)), label="window")
    return KVCacheGroup("sliding_window", sliding_window=size)


def _replayed_window(draw: Any, block_size: int) -> KVCacheGroup:
    # Windows from a block to about a third of the longest model: hits no longer than the
    # window are dropped, longer ones replay their last window.
    size = draw(st.sampled_from((block_size, block_size + 1, 2 * block_size + 1, 64)),
                label="replay window")
    return KVCacheGroup("sliding_window", sliding_window=size, bounded_replay=True)


def _reference_window(draw: Any, block_size: int) -> KVCacheGroup:
    size = draw(st.sampled_from((block_size // 2, block_size + 1, 2 * block_size)),
                label="rswa_window")
    return KVCacheGroup("reference_window", rswa_window=size)


def _groups(draw: Any, block_size: int, layouts: tuple[str, ...] = LAYOUTS,
            align_only: bool = False) -> tuple[KVCacheGroup, ...]:
    layout = draw(st.sampled_from(layouts), label="layout")
    if layout == "window-alone":
        return (_window(draw, block_size),)
    if layout == "reference-alone":
        return (_reference_window(draw, block_size),)
    groups = [KVCacheGroup("full")]
    if layout == "reference":
        groups.append(_reference_window(draw, block_size))
    if "window" in layout:
        groups.append(_window(draw, block_size))
    if "replay" in layout:
        groups.append(_replayed_window(draw, block_size))
    if layout == "ring":
        groups.append(KVCacheGroup("circular_buffer"))
    if "chunked" in layout:
        chunk = draw(st.sampled_from((2 * block_size, 4 * block_size)), label="chunk")
        groups.append(KVCacheGroup("chunked_local", attention_chunk_size=chunk))
    if "mamba" in layout:
        # 'align' (block-aligned chunks) twice as often: 0.33 refuses 'none' with caching on.
        mode: MambaCacheMode | None = "align" if align_only else draw(
            st.sampled_from((None, "align", "align")), label="mamba_cache_mode")
        groups.append(KVCacheGroup("mamba", mamba_cache_mode=mode))
    return tuple(groups)


def _mamba_align(groups: tuple[KVCacheGroup, ...]) -> bool:
    """A mamba 'align' group: block-aligned chunks, and prefix caching that 0.33 allows."""
    return any(g.mamba_cache_mode == "align" for g in groups)


@st.composite
def engine_configs(draw: Any, sub_block: bool = False, dcp: bool = False,
                   mamba_align: bool = False) -> EngineConfig:
    """`sub_block`: only mamba 'align' hybrids with hashes finer than the block (hits that end
    inside a block, `impl.core.partial_hits`; with a window group too, which turns the hits
    off but not the copy of a producer's prompt-tail state). `dcp`: full attention under
    decode context parallelism (blocks of 2 or 4 ranks' tokens). `mamba_align`: only mamba
    'align' hybrids hashed by the block (what a KV connector beside mamba runs)."""
    block_size = draw(st.sampled_from((16, 16, 32)), label="block_size")
    max_model_len = draw(st.sampled_from((64, 128, 256)), label="max_model_len")
    chunked = draw(st.booleans(), label="chunked_prefill")
    max_num_seqs = draw(st.integers(1, 6), label="max_num_seqs")
    if chunked:
        budget = draw(st.sampled_from((8, 16, 17, 32, 64, 128, 256)), label="budget")
    else:  # at the edge (exactly max_model_len) or past it
        budget = max_model_len + draw(st.sampled_from((0, 0, 1, 64)), label="budget_extra")
    budget = max(budget, max_num_seqs)
    groups = (_groups(draw, block_size, ("mamba", "mamba", "mamba", "window+mamba"),
                      align_only=True)
              if sub_block or mamba_align
              else _groups(draw, block_size, ("full", "full", "mamba") if dcp else LAYOUTS,
                           align_only=dcp))
    # Every group of the one shared pool can hold a full-length request (plus a block of
    # slack), or admission could wait forever on both systems alike.
    align = _mamba_align(groups)
    spec = draw(st.sampled_from((0, 0, 1, 2, 3)), label="num_spec_tokens")
    # ... plus, beside mamba, a state block per speculative token.
    min_blocks = len(groups) * (-(-max_model_len // block_size) + 1) + 1 + (
        spec if any(g.type == "mamba" for g in groups) else 0)
    # Upstream hashes a single group at its block size only (its unitary coordinator asserts).
    # With mamba 'align', finer hashes give sub-block hits: drawn more often and finer.
    hash_block = None if len(groups) == 1 or dcp or mamba_align else draw(
        st.sampled_from((block_size // 2, block_size // 4, block_size // 8) if sub_block
                        else (None, block_size // 2, block_size // 4, block_size // 8) if align
                        else (None, None, block_size // 2)), label="hash_block_size")
    # An EAGLE drafter (hits give up their last block; from 0.33 block hashes cover the next
    # token instead) where upstream runs it: no chunked local groups.
    eagle = bool(spec) and all(g.type != "chunked_local" for g in groups) and draw(
        st.sampled_from((False, False, True)), label="eagle")
    # Sparse retention (vLLM's default, 0) where it decides something: windows and mamba
    # states keep only the tails a replay or a shared prefix's junction can reach; an
    # interval (a multiple of the block) also the tails ending each segment of that length
    # (one block: every block is a segment's end, so everything is kept).
    retention = None if not any(
        g.type in ("sliding_window", "mamba") and not g.bounded_replay for g in groups
    ) else draw(st.sampled_from((None, None, 0, 0, block_size, 2 * block_size, 4 * block_size)),
                label="retention")
    # Half of EAGLE's draws are the model's own MTP modules instead, a chain of them (which
    # reads `spec` prompt tokens past each chunk) when there are two or three.
    mtp_modules = draw(st.sampled_from((0, 1, 2, 3)), label="mtp modules") if eagle else 0
    # The engine's opt-in mamba state at a shared prefix's junction, where it can take effect
    # (EAGLE beside mamba 'align' with sub-block hits; a chain of MTP modules turns it off).
    junctions = align and eagle and hash_block is not None and draw(
        st.booleans(), label="junction checkpoints")
    interval = draw(st.sampled_from((1, 1, 1, 2, 3)), label="prefill_schedule_interval")
    # A cadence is held by the engine itself (0.33) or, on a data-parallel rank, by its
    # engine core (both releases).
    data_parallel = interval > 1 and draw(st.booleans(), label="data_parallel")
    threshold = draw(st.sampled_from((0, 0, 16, 40) if spec else (0, 0, 1, 16, 40)),
                     label="threshold")
    caching = (sub_block or mamba_align or dcp and align
               or draw(st.booleans(), label="prefix_caching"))
    dcp_size = context_parallel_sizes(draw, groups, hash_block, caching, always=dcp)
    return EngineConfig(
        block_size=block_size,
        num_blocks=draw(st.integers(min_blocks, min_blocks + 40), label="num_blocks"),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        # Not below 1 + num_spec_tokens with spec decode: vLLM 0.32 asserts when a padded
        # decode (1 + k tokens) is then cut by the threshold (scheduler.py, pad_spec_decode;
        # pinned by conformance/tests/test_upstream_bugs.py, which fails once upstream is fixed).
        long_prefill_token_threshold=threshold,
        # Floored at the budget's fair share among the requests (upstream's opt-in).
        long_prefill_token_threshold_adaptive=bool(threshold) and draw(
            st.booleans(), label="adaptive threshold"),
        enable_chunked_prefill=chunked,
        policy=draw(st.sampled_from(("fcfs", "priority")), label="policy"),
        enable_prefix_caching=caching,
        hash_algo=draw(st.sampled_from(("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")),
                       label="hash_algo"),
        kv_cache_groups=groups,
        num_spec_tokens=spec,
        async_scheduling=draw(st.booleans(), label="async"),
        hash_block_size=hash_block,
        num_lookahead_tokens=spec if eagle else (
            draw(st.sampled_from((0, spec)), label="lookahead") if spec else 0),
        spec_method="ngram" if not eagle else "mtp" if mtp_modules else "eagle",
        mtp_modules=max(mtp_modules, 1),
        prefill_schedule_interval=interval,
        prefix_cache_retention_interval=retention,
        enable_mamba_shared_prefix_checkpoint=junctions,
        max_loras=draw(st.sampled_from((0, 0, 1, 2)), label="max_loras"),
        data_parallel=data_parallel,
        # Per-request spec-decode metrics ride on finished outputs (compared); upstream
        # refuses them without spec decode.
        per_request_spec_decode_metrics=draw(
            st.sampled_from(("none", "none", "summary", "detailed")), label="request metrics")
        if spec else "none",
        decode_context_parallel_size=dcp_size,
    )


def _prefixes(block_size: int) -> tuple[tuple[int, ...], ...]:
    """Shared system prompts: 1.5, 3 and 2.5 blocks (aligned and not)."""
    return (tuple(range(1000, 1000 + block_size * 3 // 2)),
            tuple(range(2000, 2000 + block_size * 3)),
            tuple(range(3000, 3000 + block_size * 5 // 2)))


def turn_output(workload_so_far: Workload, request: RequestSpec, plan: PlanSpec | None,
                max_model_len: int) -> tuple[int, ...]:
    """The tokens `request` will generate (the token model's, up to its stop or length cap):
    what a follow-up turn's prompt repeats after the previous prompt."""
    probe = Workload("turn", "", workload_so_far.config, (request,),
                     plans=() if plan is None else (plan,),
                     token_seed=workload_so_far.token_seed)
    model = TokenModel(probe)
    out: list[int] = []
    limit = min(request.max_tokens, max_model_len - request.prompt_len)
    while len(out) < limit:
        token = model.token(request.request_id, len(out))
        out.append(token)
        if (token == EOS and not request.ignore_eos) or token in request.stop_token_ids:
            break
    return tuple(out)


@st.composite
def request_specs(draw: Any, index: int, config: EngineConfig,
                  previous: tuple[RequestSpec, ...], token_seed: int,
                  plans: dict[str, PlanSpec]) -> RequestSpec:
    rid = f"r{index}"
    follow = previous and draw(st.integers(0, 3), label="follow_up") == 0
    lora = draw(st.sampled_from(LORAS), label="lora")
    if follow:
        parent = draw(st.sampled_from(previous), label="parent")
        lora = parent.lora_name  # a session keeps its adapter
        history = Workload("so-far", "", config, (), token_seed=token_seed)
        output = turn_output(history, parent, plans.get(parent.request_id),
                             config.max_model_len)
        fresh = tuple(5000 + 100 * index + i
                      for i in range(draw(st.integers(1, 20), label="new_tokens")))
        prompt = parent.prompt_token_ids + output + fresh
        arrival = parent.arrival_step + draw(st.integers(0, 30), label="gap")
    else:
        prefix = draw(st.sampled_from(((), *_prefixes(config.block_size))), label="prefix")
        filler = draw(st.integers(0 if prefix else 1, 60), label="filler")
        prompt = prefix + tuple(5000 + 100 * index + i for i in range(filler))
        arrival = draw(st.integers(0, 12), label="arrival")
    prompt = prompt[: config.max_model_len - 1]
    room = config.max_model_len - len(prompt)
    if draw(st.integers(0, 4), label="fill_context") == 0:
        max_tokens = room  # prompt + output reach max_model_len exactly
    else:
        max_tokens = min(draw(st.integers(1, 24), label="max_tokens"), room)
    return RequestSpec(
        request_id=rid,
        arrival_step=arrival,
        prompt_token_ids=prompt,
        max_tokens=max_tokens,
        min_tokens=draw(st.sampled_from((0, 0, 0, min(3, max_tokens))), label="min_tokens"),
        stop_token_ids=draw(st.sampled_from(((), (), (STOP,))), label="stop"),
        eos_token_id=EOS,
        ignore_eos=draw(st.booleans()) and draw(st.booleans()),
        priority=draw(st.integers(0, 2), label="priority"),
        cache_salt=draw(st.sampled_from((None, None, None, "salt")), label="salt"),
        lora_name=lora,
        kv_cache_report_mode=draw(st.sampled_from(("incremental",) * 3 + ("full",)),
                                  label="report_mode"),
    )


def _plan(draw: Any, config: EngineConfig, request: RequestSpec) -> PlanSpec | None:
    eos_at = draw(st.sampled_from((None, None, 0, 2, 7)), label="eos_at")
    if eos_at is not None and eos_at >= request.max_tokens:
        eos_at = None  # past the last output: the workload format rejects it
    acceptance = None
    if config.num_spec_tokens and draw(st.booleans(), label="planned_acceptance"):
        acceptance = tuple(draw(st.lists(st.integers(0, config.num_spec_tokens), max_size=8),
                                label="acceptance"))
    if eos_at is None and acceptance is None:
        return None
    return PlanSpec(request.request_id, eos_at, acceptance)


@st.composite
def workloads(draw: Any, max_requests: int = 10, sub_block: bool = False,
              dcp: bool = False, mamba_align: bool = False) -> Workload:
    """`sub_block`, `dcp`, `mamba_align`: configs of `engine_configs` with that flag."""
    config = draw(engine_configs(sub_block, dcp, mamba_align))
    token_seed = draw(st.integers(0, 3), label="token_seed")
    count = draw(st.integers(1, max_requests), label="num_requests")
    requests: list[RequestSpec] = []
    plans: dict[str, PlanSpec] = {}
    aborts = []
    for index in range(count):
        request = draw(request_specs(index, config, tuple(requests), token_seed, plans))
        requests.append(request)
        plan = _plan(draw, config, request)
        if plan is not None:
            plans[request.request_id] = plan
        if draw(st.integers(0, 5), label="abort") == 0:
            aborts.append(AbortSpec(request.request_id,
                                    request.arrival_step + draw(st.integers(0, 10))))
    return Workload(
        name="hypothesis", description="generated by conformance.sched.strategies.workloads",
        config=config, requests=tuple(sorted(requests, key=lambda r: r.arrival_step)),
        plans=tuple(plans.values()), aborts=tuple(sorted(aborts, key=lambda a: a.step)),
        token_seed=token_seed,
    )
