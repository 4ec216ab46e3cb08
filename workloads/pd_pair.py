"""A prefill/decode pair: two engine instances behind a router, as a P/D deployment runs them.

`workloads.pd` models one instance against a modelled peer. A workload with a `pd_pair`
section runs both: a prefill instance with the workload's `config` and a decode instance with
the same config but for the fields `decode` overrides (its pool, seats and token budget). Its
requests are the client's; the harness plays the router, as vLLM's P/D proxy does:

* each request arrives at the prefill instance at its `arrival_step` as a prefill-side request
  (`do_remote_decode`) capped at one token;
* when its prefill finishes and hands on what to read, the request goes to the decode
  instance `router_latency_steps` later as a decode-side request (`do_remote_prefill`), with
  its own `max_tokens`; one whose prefill ends otherwise (an abort) is not sent on;
* a client's abort reaches whichever instance holds the request then, and a request aborted
  before the router sent it on is never sent.

The two instances share the transfer: the decode side's pull (push mode: the prefill side's
write into the blocks the decode side registered) takes `load_latency_steps`, and the prefill
instance frees its held blocks when it hears the transfer ended, `send_latency_steps` (at
least one: the prefill instance steps first) after it did. A request's `kv_transfer` may only
mark its decode-side transfer as failing (`load_fails`) or lost (`pull_lost`); the router
assigns the parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from workloads.errors import WorkloadError
from workloads.model import EngineConfig, Workload
from workloads.pd import KVTransferSpec, PDPairSpec
from workloads.schema import PDPairModel


def decode_config(pair: PDPairSpec, config: EngineConfig) -> EngineConfig:
    """The decode instance's config: the prefill instance's with the pair's overrides."""
    def kept(value: int | None, default: int) -> int:
        return default if value is None else value

    return replace(
        config, num_blocks=kept(pair.decode_num_blocks, config.num_blocks),
        max_num_seqs=kept(pair.decode_max_num_seqs, config.max_num_seqs),
        max_num_batched_tokens=kept(pair.decode_max_num_batched_tokens,
                                    config.max_num_batched_tokens))


def pd_pair_of(model: PDPairModel | None) -> PDPairSpec | None:
    """The header's `pd_pair` section (None: one instance)."""
    if model is None:
        return None
    return PDPairSpec(model.router_latency_steps, model.decode.num_blocks,
                      model.decode.max_num_seqs, model.decode.max_num_batched_tokens)


def check_pd_pair(workload: Workload, fail: Callable[[int | None, str, str], WorkloadError],
                  request_lines: dict[str, int]) -> None:
    """`fail(line, field, problem)` for a pair the harness cannot run (the header is line 1;
    a request's line from `request_lines`)."""
    pair = workload.pd_pair
    assert pair is not None
    connector = workload.config.kv_connector
    if connector is None or connector.type != "nixl":
        raise fail(1, "pd_pair", "needs the engine's kv_connector of type 'nixl' (got "
                   f"{'no connector' if connector is None else repr(connector.type)})")
    if connector.bidirectional:
        raise fail(1, "pd_pair", "a bidirectional connector's readback needs the router to "
                   "send later turns back to the prefill instance (not modelled yet)")
    if workload.controls:
        raise fail(1, "pd_pair", "operator controls in a P/D pair are not modelled yet (which "
                   "instance would they reach?)")
    decode = decode_config(pair, workload.config)
    # One request of max_model_len in every group (a window holds fewer, but no less than
    # one block; sizing by the full length is what upstream's startup check asks too).
    needed = -(-decode.max_model_len // decode.block_size) * len(decode.kv_cache_groups)
    if decode.num_blocks - 1 < needed:
        raise fail(1, "pd_pair.decode.num_blocks", f"{decode.num_blocks - 1} usable blocks "
                   f"cannot hold one request of max_model_len {decode.max_model_len} "
                   f"({needed} blocks of {decode.block_size}"
                   f"{'' if len(decode.kv_cache_groups) == 1 else ' over its groups'})")
    if not decode.enable_chunked_prefill and \
            decode.max_num_batched_tokens < decode.max_model_len:
        raise fail(1, "pd_pair.decode.max_num_batched_tokens", "must be >= max_model_len "
                   f"{decode.max_model_len} when chunked prefill is off")
    for request in workload.requests:
        if request.kv_transfer is not None and request.kv_transfer.role != "decode":
            raise fail(request_lines.get(request.request_id), "kv_transfer.role",
                       "in a P/D pair the router assigns the parts; kv_transfer may only mark "
                       "the decode side's transfer failing or lost (role 'decode')")


def prefill_side(workload: Workload) -> Workload:
    """What the prefill instance runs: every request as a prefill-side request capped at one
    token, arriving as the client sends it; the client's aborts."""
    return replace(
        workload, name=f"{workload.name}@prefill", pd_pair=None,
        requests=tuple(replace(r, kv_transfer=KVTransferSpec("prefill"), max_tokens=1,
                               min_tokens=0) for r in workload.requests))


def decode_side(workload: Workload) -> Workload:
    """What the decode instance runs: every request as a decode-side request (the router
    decides when each arrives), on the decode instance's config; the client's aborts."""
    pair = workload.pd_pair
    assert pair is not None
    return replace(
        workload, name=f"{workload.name}@decode", pd_pair=None,
        config=decode_config(pair, workload.config),
        requests=tuple(replace(r, kv_transfer=KVTransferSpec(
            "decode", r.kv_transfer is not None and r.kv_transfer.load_fails,
            r.kv_transfer is not None and r.kv_transfer.pull_lost))
            for r in workload.requests))
