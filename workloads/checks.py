"""Rules that relate records to each other and to the header, and the build of a `Workload`.

The pydantic models only see one line at a time. Here we know every line, so each rule can
point at the offending line and field: a duplicate request id, an abort of an id that never
arrives or that fires before its request arrives, token ids outside the vocabulary, a prompt
longer than `max_model_len`. The engine config's own rules (one vLLM itself would refuse to
start with) are `workloads.engine_checks`, run first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workloads.closed_loop import resolve_arrivals
from workloads.controls import ControlSpec, check_controls
from workloads.encoder_decoder import check_encoder_items
from workloads.engine_checks import engine_config
from workloads.errors import WorkloadError
from workloads.grammar import GrammarSpec, check_grammar
from workloads.located import Located
from workloads.model import (
    AbortSpec,
    AfterSpec,
    EngineConfig,
    PlanSpec,
    PromptSpec,
    RequestSpec,
    Segment,
    Workload,
)
from workloads.multimodal import MultimodalItem, check_items
from workloads.offload_limits import OffloadLimitsSpec, check_offload_limits
from workloads.pd import KVTransferSpec, check_kv_transfer
from workloads.pd_pair import check_pd_pair, pd_pair_of
from workloads.prompts import TokenSource
from workloads.repetition import checked_repetition_detection
from workloads.schema import (
    AbortModel,
    ControlModel,
    HeaderModel,
    PlanModel,
    RequestModel,
)
from workloads.streaming import StreamChunk, check_stream

_Fail = Callable[[str, str], WorkloadError]


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
                                  c.record.mode, c.record.reset_connector))
             for c in controls or ()],
            lambda line, field, problem: WorkloadError(source, line, field, problem)),
        pd_pair=pd_pair_of(head.pd_pair),
    )
    if workload.pd_pair is not None:
        check_pd_pair(workload, lambda line, field, problem: WorkloadError(
            source, line, field, problem), {r: item.line for r, item in built.items()})
    return workload


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
    offload_limits = None
    if rec.offload_limits is not None:
        offload_limits = OffloadLimitsSpec(rec.offload_limits.max_load_tokens,
                                           rec.offload_limits.max_offload_tokens)
        check_offload_limits(
            offload_limits, config.kv_connector is not None
            and config.kv_connector.part("offloading") is not None,
            streaming=rec.stream_end_step is not None, fail=fail)
    repetition = None if rec.repetition_detection is None else checked_repetition_detection(
        rec.repetition_detection.max_pattern_size, rec.repetition_detection.min_pattern_size,
        rec.repetition_detection.min_count, fail)
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
        offload_limits=offload_limits,
        repetition_detection=repetition,
    )


def _check_pooling(rec: RequestModel, fail: _Fail) -> None:
    """A pooling model's request produces pooled output after its prefill, never a token."""
    if rec.max_tokens != 1:
        raise fail("max_tokens", f"must be 1 under runner 'pooling' (a pooling request "
                   f"produces no tokens; got {rec.max_tokens})")
    for field, value in (("min_tokens", rec.min_tokens), ("grammar", rec.grammar),
                         ("repetition_detection", rec.repetition_detection),
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

