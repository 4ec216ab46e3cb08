"""Rules that relate records to each other and to the header, and the build of a `Workload`.

The pydantic models only see one line at a time. Here we know every line, so each rule can
point at the offending line and field: a duplicate request id, an abort of an id that never
arrives or that fires before its request arrives, token ids outside the vocabulary, a prompt
longer than `max_model_len`, or an engine config vLLM itself would refuse to start with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workloads.closed_loop import connector_config, continuum_config, resolve_arrivals
from workloads.controls import ControlSpec, check_controls
from workloads.eagle import eagle_lookahead
from workloads.encoder_decoder import check_encoder_decoder_config, check_encoder_items
from workloads.errors import WorkloadError
from workloads.grammar import GrammarSpec, check_grammar
from workloads.located import Located
from workloads.model import (
    AbortSpec,
    AfterSpec,
    EngineConfig,
    KVCacheGroup,
    PlanSpec,
    PromptSpec,
    RequestSpec,
    Segment,
    Workload,
)
from workloads.models import plan_engine_groups
from workloads.multimodal import MultimodalConfig, MultimodalItem, check_items
from workloads.pd import KVTransferSpec, check_kv_transfer
from workloads.pd_pair import check_pd_pair, pd_pair_of
from workloads.prompts import TokenSource
from workloads.schema import (
    AbortModel,
    ControlModel,
    EngineConfigModel,
    HeaderModel,
    PlanModel,
    RequestModel,
)
from workloads.streaming import StreamChunk, check_stream
from workloads.uncached_groups import check_uncached_groups

_Fail = Callable[[str, str], WorkloadError]


def engine_config(model: EngineConfigModel, source: str | Path, line: int,
                  step_ms: float | None = None) -> EngineConfig:
    def fail(field: str, problem: str) -> WorkloadError:
        return WorkloadError(source, line, f"config.{field}", problem)

    if model.model is not None:  # groups and block size from the model's KV-cache plan
        model = plan_engine_groups(model, source, line)
    if model.hash_block_size is not None and model.block_size % model.hash_block_size:
        raise fail("hash_block_size", f"must divide block_size {model.block_size}")
    if model.num_lookahead_tokens and not model.num_spec_tokens:
        raise fail("num_lookahead_tokens", "needs num_spec_tokens > 0 (a drafter to write ahead)")
    if (model.hash_block_size not in (None, model.block_size) and model.enable_prefix_caching
            and len(model.kv_cache_groups) == 1):
        raise fail("hash_block_size", f"must equal block_size {model.block_size} with one "
                   "KV-cache group and prefix caching on (upstream hashes at the block size)")
    retention = model.prefix_cache_retention_interval
    if retention is not None and retention > 0:
        if retention % model.block_size:
            raise fail("prefix_cache_retention_interval", f"must be 0 or a multiple of the "
                       f"block size {model.block_size} (got {retention})")
        if not any(g.type in ("sliding_window", "mamba") for g in model.kv_cache_groups):
            raise fail("prefix_cache_retention_interval", "an interval needs a sliding-window "
                       "or mamba group (it sparsifies only their caches; upstream refuses it "
                       "otherwise); use 0 or null")
    if model.data_parallel and model.prefill_schedule_interval < 2:
        raise fail("data_parallel", "needs prefill_schedule_interval > 1 (the cadence the "
                   "data-parallel engine core throttles prefill to)")
    if model.runner == "pooling":
        for field, value, why in (
                ("num_spec_tokens", model.num_spec_tokens, "a pooling model samples nothing "
                 "to draft after"),
                ("async_scheduling", model.async_scheduling, "not modelled yet for pooling "
                 "models (upstream turns it off for them by default)"),
                ("multimodal", model.multimodal, "not modelled yet for pooling models"),
                ("kv_connector", model.kv_connector, "not modelled yet for pooling models")):
            if value:
                raise fail(field, f"must be off with runner 'pooling': {why}")
    if model.max_num_batched_tokens < model.max_num_seqs:
        raise fail("max_num_batched_tokens", f"must be >= max_num_seqs {model.max_num_seqs}")
    if not model.enable_chunked_prefill and model.max_num_batched_tokens < model.max_model_len:
        raise fail(
            "max_num_batched_tokens",
            f"must be >= max_model_len {model.max_model_len} when chunked prefill is off",
        )
    needed = -(-model.max_model_len // model.block_size)
    # A reference window keeps the whole prompt: as full attention, one request can need it all.
    has_full = any(g.type in ("full", "reference_window") for g in model.kv_cache_groups)
    if has_full and model.num_blocks - 1 < needed:
        raise fail(
            "num_blocks",
            f"{model.num_blocks - 1} usable blocks cannot hold one request of max_model_len "
            f"{model.max_model_len} ({needed} blocks of {model.block_size})",
        )
    if "nixl" in _connector_types(model):
        for index, g in enumerate(model.kv_cache_groups):
            if g.type not in ("full", "reference_window", "sliding_window", "chunked_local") \
                    or g.bounded_replay:
                raise fail(f"kv_cache_groups[{index}]", f"the 'nixl' connector with a "
                           f"{g.type}{' (bounded replay)' if g.bounded_replay else ''} group is "
                           "not modelled (full attention, windows and chunked local are)")
    check_uncached_groups(model, fail)
    check_encoder_decoder_config(model, fail)
    modes = {g.mamba_cache_mode or "none" for g in model.kv_cache_groups if g.type == "mamba"}
    if len(modes) > 1:
        raise fail("kv_cache_groups", "mamba groups must share one mamba_cache_mode (upstream "
                   f"has one per engine; got {sorted(modes)})")
    groups = tuple(
        KVCacheGroup(g.type, g.sliding_window, g.attention_chunk_size, g.mamba_cache_mode,
                     g.rswa_window, g.bounded_replay)
        for g in model.kv_cache_groups
    )
    return EngineConfig(
        model=model.model,
        block_size=model.block_size,
        num_blocks=model.num_blocks,
        max_num_seqs=model.max_num_seqs,
        max_num_batched_tokens=model.max_num_batched_tokens,
        max_model_len=model.max_model_len,
        long_prefill_token_threshold=model.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=model.long_prefill_token_threshold_adaptive,
        enable_chunked_prefill=model.enable_chunked_prefill,
        policy=model.policy,
        enable_prefix_caching=model.enable_prefix_caching,
        hash_algo=model.hash_algo,
        kv_cache_groups=groups,
        num_spec_tokens=model.num_spec_tokens,
        async_scheduling=model.async_scheduling,
        hash_block_size=model.hash_block_size,
        num_lookahead_tokens=eagle_lookahead(model, fail),
        prefill_schedule_interval=model.prefill_schedule_interval,
        max_loras=model.max_loras,
        prefix_cache_retention_interval=model.prefix_cache_retention_interval,
        continuum=continuum_config(model.continuum, model.policy, step_ms, fail),
        kv_connector=connector_config(model.kv_connector, len(groups), model.block_size, fail),
        multimodal=None if model.multimodal is None else MultimodalConfig(
            model.multimodal.max_num_encoder_input_tokens, model.multimodal.encoder_cache_size,
            model.multimodal.disable_chunked_mm_input, model.multimodal.max_tokens_per_item),
        log_stats=model.log_stats,
        runner=model.runner,
        data_parallel=model.data_parallel,
        log_iteration_details=model.log_iteration_details,
        per_request_spec_decode_metrics=model.per_request_spec_decode_metrics,
        spec_method=model.spec_method,
    )


def _connector_types(model: EngineConfigModel) -> set[str]:
    """The connector's type and, for a MultiConnector, its connectors' types."""
    connector = model.kv_connector
    if connector is None:
        return set()
    return {connector.type, *(c.type for c in getattr(connector, "connectors", ()))}


def build_workload(
    source: str | Path,
    header: Located[HeaderModel],
    requests: list[Located[RequestModel]],
    aborts: list[Located[AbortModel]],
    plans: list[Located[PlanModel]],
    controls: list[Located[ControlModel]] | None = None,
) -> Workload:
    """Check every cross-record rule and assemble the workload in its canonical order."""
    head = header.record
    config = engine_config(head.config, source, header.line, head.step_ms)
    tokens = TokenSource(head.vocab_size, head.token_seed)
    # Shared segments repeat across requests; building each once keeps large loads fast.
    segments: dict[tuple[str, int], Segment] = {}
    built: dict[str, Located[RequestSpec]] = {}
    for item in requests:
        first = built.get(item.record.request_id)
        if first is not None:
            problem = (
                f"duplicate request id {item.record.request_id!r} (first on line {first.line})"
            )
            raise WorkloadError(source, item.line, "request_id", problem)
        built[item.record.request_id] = Located(
            item.line, _request(item, head, config, tokens, segments, source)
        )
    resolve_arrivals(built, head.step_ms, config.max_model_len, source)
    ordered = sorted(built.values(), key=lambda r: r.record.arrival_step)
    workload = Workload(
        name=head.name,
        description=head.description,
        config=config,
        requests=tuple(r.record for r in ordered),
        aborts=_aborts(aborts, built, source),
        plans=_plans(plans, built, config, source, [r.record.request_id for r in ordered]),
        vocab_size=head.vocab_size,
        token_seed=head.token_seed,
        step_ms=head.step_ms,
        controls=check_controls(
            [(c.line, ControlSpec(c.record.step, c.record.action, c.record.preempt_running,
                                  c.record.mode, _reset_connector(c, config, source)))
             for c in controls or ()],
            lambda line, field, problem: WorkloadError(source, line, field, problem)),
        pd_pair=pd_pair_of(head.pd_pair),
    )
    if workload.pd_pair is not None:
        check_pd_pair(workload, lambda line, field, problem: WorkloadError(
            source, line, field, problem), {r: item.line for r, item in built.items()})
    return workload


def _reset_connector(control: Located[ControlModel], config: EngineConfig,
                     source: str | Path) -> bool:
    """A control's `reset_connector`, refused where the twin does not model the reset."""
    connector = config.kv_connector
    if control.record.reset_connector and connector is not None and \
            connector.type == "simple_cpu_offload":
        raise WorkloadError(source, control.line, "reset_connector", "the simple_cpu_offload "
                            "connector's reset (transfers in flight abandoned) is not modelled "
                            "yet; reset the prefix cache alone")
    return control.record.reset_connector


def _request(
    item: Located[RequestModel],
    head: HeaderModel,
    config: EngineConfig,
    tokens: TokenSource,
    segments: dict[tuple[str, int], Segment],
    source: str | Path,
) -> RequestSpec:
    rec = item.record

    def fail(field: str, problem: str) -> WorkloadError:
        return WorkloadError(source, item.line, field, problem)

    if sum(x is not None for x in (rec.arrival_step, rec.arrival_ms, rec.after)) != 1:
        raise fail("arrival_step", "give exactly one of 'arrival_step', 'arrival_ms' and "
                   "'after'")
    if rec.after is not None:
        arrival = 0  # the earliest step is set once every request is known (`closed_loop`)
    elif rec.arrival_step is not None:
        arrival = rec.arrival_step
    elif head.step_ms is None:
        raise fail("arrival_ms", "needs 'step_ms' in the header to convert times to steps")
    else:
        arrival = int((rec.arrival_ms or 0.0) // head.step_ms)
    vocab = head.vocab_size
    if (rec.prompt_token_ids is None) == (rec.prompt is None):
        raise fail("prompt", "give exactly one of 'prompt' and 'prompt_token_ids'")
    spec = _prompt_spec(rec, segments, fail)
    prompt_len = len(rec.prompt_token_ids or ()) if spec is None else spec.length
    if prompt_len > config.max_model_len:
        problem = f"prompt of {prompt_len} tokens exceeds config.max_model_len"
        field = "prompt_token_ids" if spec is None else "prompt.length"
        raise fail(field, f"{problem} {config.max_model_len}")
    if rec.prompt_token_ids is not None:
        _check_vocab(rec.prompt_token_ids, vocab, "prompt_token_ids", fail)
        prompt = tuple(rec.prompt_token_ids)
    else:
        assert spec is not None
        prompt = tokens.expand(spec, rec.request_id)
    if rec.min_tokens > rec.max_tokens:
        raise fail("min_tokens", f"{rec.min_tokens} is more than max_tokens {rec.max_tokens}")
    _check_vocab(rec.stop_token_ids, vocab, "stop_token_ids", fail)
    if rec.eos_token_id is not None and rec.eos_token_id >= vocab:
        raise fail("eos_token_id", f"token id {rec.eos_token_id} is not below vocab_size {vocab}")
    mm_items = tuple(MultimodalItem(m.identifier, m.offset, m.length,
                                    None if m.is_embed is None else tuple(m.is_embed), m.modality)
                     for m in rec.mm_items)
    if mm_items and rec.after is not None:
        raise fail("mm_items", "a request that continues another ('after') cannot carry "
                   "multimodal items yet: its prompt is only known at run time")
    if config.is_encoder_decoder:
        check_encoder_items(mm_items, config.multimodal, fail)
    else:
        check_items(mm_items, prompt_len, config.multimodal, fail)
    stream = tuple(StreamChunk(c.arrival_step, tuple(c.prompt_token_ids), c.max_tokens)
                   for c in rec.stream)
    for index, chunk in enumerate(stream):
        _check_vocab(list(chunk.prompt_token_ids), vocab, f"stream[{index}].prompt_token_ids",
                     fail)
    if rec.stream_end_step is not None and (rec.after is not None or mm_items):
        raise fail("stream_end_step", "a streaming session cannot continue another request "
                   "('after') or carry multimodal items yet")
    check_stream(arrival, prompt_len, rec.max_tokens, stream, rec.stream_end_step,
                 config.max_model_len, fail)
    if config.runner == "pooling":
        _check_pooling(rec, fail)
    grammar = None
    if rec.grammar is not None:
        grammar = GrammarSpec(rec.grammar.allowed[0], rec.grammar.allowed[1],
                              rec.grammar.compile_steps, rec.grammar.fails)
        if rec.stream_end_step is not None:
            raise fail("grammar", "a streaming session cannot carry a grammar yet")
        ends = frozenset(rec.stop_token_ids) | (
            frozenset() if rec.eos_token_id is None else {rec.eos_token_id})
        check_grammar(grammar, vocab, ends, fail)
    kv_transfer = None
    if rec.kv_transfer is not None:
        nixl = None if config.kv_connector is None else config.kv_connector.part("nixl")
        kv_transfer = KVTransferSpec(rec.kv_transfer.role, rec.kv_transfer.load_fails,
                                     rec.kv_transfer.pull_lost, rec.kv_transfer.readback_tokens)
        check_kv_transfer(kv_transfer, None if config.kv_connector is None
                          else "nixl" if nixl is not None
                          else config.kv_connector.type, continues=rec.after is not None,
                          streaming=rec.stream_end_step is not None, has_mm=bool(mm_items),
                          fail=fail, bidirectional=nixl is not None and nixl.bidirectional)
    return RequestSpec(
        request_id=rec.request_id,
        arrival_step=arrival,
        prompt_token_ids=prompt,
        max_tokens=rec.max_tokens,
        min_tokens=rec.min_tokens,
        stop_token_ids=tuple(rec.stop_token_ids),
        eos_token_id=rec.eos_token_id,
        ignore_eos=rec.ignore_eos,
        priority=rec.priority,
        cache_salt=rec.cache_salt,
        lora_name=rec.lora_name,
        prompt_spec=spec,
        job_id=rec.job_id,
        is_last_step=rec.is_last_step,
        after=None if rec.after is None else AfterSpec(rec.after.request_id, rec.after.gap_ms),
        mm_items=mm_items,
        stream=stream,
        stream_end_step=rec.stream_end_step,
        resumable=rec.stream_end_step is not None,
        grammar=grammar,
        kv_cache_report_mode=rec.kv_cache_report_mode,
        kv_transfer=kv_transfer,
    )


def _check_pooling(rec: RequestModel, fail: _Fail) -> None:
    """A pooling model's request produces pooled output after its prefill, never a token."""
    if rec.max_tokens != 1:
        raise fail("max_tokens", f"must be 1 under runner 'pooling' (a pooling request "
                   f"produces no tokens; got {rec.max_tokens})")
    for field, value in (("min_tokens", rec.min_tokens), ("grammar", rec.grammar),
                         ("stream_end_step", rec.stream_end_step),
                         ("kv_cache_report_mode", rec.kv_cache_report_mode == "full")):
        if value:
            raise fail(field, "not for a pooling request (runner 'pooling' samples nothing)")


def _prompt_spec(
    rec: RequestModel, pool: dict[tuple[str, int], Segment], fail: _Fail
) -> PromptSpec | None:
    if rec.prompt is None:
        return None
    segments = tuple(
        pool.get((s.key, s.length)) or pool.setdefault((s.key, s.length), Segment(s.key, s.length))
        for s in rec.prompt.segments
    )
    covered = sum(s.length for s in segments)
    if rec.prompt.length is None and not segments:
        raise fail("prompt.length", "required when the prompt has no segments")
    length = covered if rec.prompt.length is None else rec.prompt.length
    if length < covered:
        raise fail("prompt.length", f"{length} is shorter than its segments ({covered})")
    return PromptSpec(length, segments)


def _check_vocab(ids: list[int], vocab: int, field: str, fail: _Fail) -> None:
    if ids and max(ids) >= vocab:
        index = next(i for i, t in enumerate(ids) if t >= vocab)
        raise fail(f"{field}[{index}]", f"token id {ids[index]} is not below vocab_size {vocab}")


def _aborts(
    aborts: list[Located[AbortModel]],
    requests: dict[str, Located[RequestSpec]],
    source: str | Path,
) -> tuple[AbortSpec, ...]:
    seen: dict[str, int] = {}
    out: list[AbortSpec] = []
    for item in aborts:
        rid = item.record.request_id
        target = requests.get(rid)
        if target is None:
            raise WorkloadError(
                source, item.line, "request_id", f"abort of unknown request {rid!r}"
            )
        if target.record.stream_end_step is not None:
            raise WorkloadError(source, item.line, "request_id", f"request {rid!r} is a "
                                "streaming session: it ends with its close (stream_end_step)")
        if rid in seen:
            problem = f"request {rid!r} is already aborted on line {seen[rid]}"
            raise WorkloadError(source, item.line, "request_id", problem)
        seen[rid] = item.line
        if item.record.step < target.record.arrival_step:
            problem = (
                f"abort at step {item.record.step} comes before request {rid!r} arrives "
                f"at step {target.record.arrival_step} (line {target.line})"
            )
            raise WorkloadError(source, item.line, "step", problem)
        out.append(AbortSpec(rid, item.record.step))
    out.sort(key=lambda a: a.step)
    return tuple(out)


def _plans(
    plans: list[Located[PlanModel]],
    requests: dict[str, Located[RequestSpec]],
    config: EngineConfig,
    source: str | Path,
    order: list[str],
) -> tuple[PlanSpec, ...]:
    found: dict[str, Located[PlanSpec]] = {}
    for item in plans:
        rec = item.record

        def fail(field: str, problem: str, line: int = item.line) -> WorkloadError:
            return WorkloadError(source, line, field, problem)

        target = requests.get(rec.request_id)
        if target is None:
            raise fail("request_id", f"plan for unknown request {rec.request_id!r}")
        if rec.request_id in found:
            first = found[rec.request_id].line
            raise fail(
                "request_id", f"request {rec.request_id!r} already has a plan on line {first}"
            )
        if rec.eos_at is None and rec.spec_acceptance is None:
            raise fail("eos_at", "a plan needs 'eos_at' or 'spec_acceptance'")
        if config.runner == "pooling":
            raise fail("type", "a pooling model samples no token: its requests take no plan")
        req = target.record
        if rec.eos_at is not None:
            if req.eos_token_id is None:
                raise fail("eos_at", f"request {req.request_id!r} has no eos_token_id to emit")
            if rec.eos_at >= req.max_tokens:
                problem = f"{rec.eos_at} is past the last output index {req.max_tokens - 1}"
                raise fail("eos_at", problem)
        acceptance = None
        if rec.spec_acceptance is not None:
            k = config.num_spec_tokens
            if k == 0:
                raise fail("spec_acceptance", "config.num_spec_tokens is 0 (spec decode is off)")
            for index, accepted in enumerate(rec.spec_acceptance):
                if accepted > k:
                    problem = f"{accepted} accepted drafts exceed config.num_spec_tokens {k}"
                    raise fail(f"spec_acceptance[{index}]", problem)
            acceptance = tuple(rec.spec_acceptance)
        found[rec.request_id] = Located(item.line, PlanSpec(rec.request_id, rec.eos_at, acceptance))
    return tuple(found[rid].record for rid in order if rid in found)

