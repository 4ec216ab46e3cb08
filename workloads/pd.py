"""Prefill/decode disaggregation (P/D) seen from one instance: requests whose KV crosses to or
from a remote peer through upstream's NIXL connector.

A P/D deployment runs a prefill instance and a decode instance behind a router. The router
sends a request to the prefill instance with `do_remote_decode` (compute the prompt, keep the
KV blocks until the decode side has read them), then to the decode instance with
`do_remote_prefill` and the prefill side's block ids (pull the prompt's KV, then decode). One
workload models one instance, which may see both kinds, as a `kv_both` instance does:

* `{"role": "decode"}`: the prompt's KV is pulled from the (modelled) prefill peer; the
  request waits (WAITING_FOR_REMOTE_KVS) until the pull lands, `load_latency_steps` after the
  step that asked for it. `load_fails`: the pull fails as a whole (the worker reports it in
  `failed_recving`); the engine's `load_failure_policy` decides between an error and a local
  recompute. `pull_lost`: the peer never answers (it crashed, or dropped the request), so the
  pull neither lands nor fails (vllm#46283's situation).
* `{"role": "prefill"}`: the request is computed here and its KV is read by the modelled
  decode peer; a request that finishes normally keeps its blocks until the peer's read is
  reported (`finished_sending`), `send_latency_steps` after the step that announced it.

The peer itself is not run: its block ids, engine id and address are fixed by the harness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from workloads.errors import WorkloadError

PD_ROLES = ("prefill", "decode")


@dataclass(frozen=True, slots=True)
class KVTransferSpec:
    """A request's part in a P/D pair (see the module docstring)."""

    role: Literal["prefill", "decode"]
    load_fails: bool = False
    pull_lost: bool = False
    readback_tokens: int | None = None
    """A prefill of a later turn: the tokens the decode side kept from the turn before, which
    it pulls back (the connector's `bidirectional`; None: none)."""

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, **({"load_fails": True} if self.load_fails else {}),
                **({"pull_lost": True} if self.pull_lost else {}),
                **({"readback_tokens": self.readback_tokens}
                   if self.readback_tokens is not None else {})}


def check_kv_transfer(spec: KVTransferSpec, connector_type: str | None, *,
                      continues: bool, streaming: bool, has_mm: bool,
                      fail: Callable[[str, str], WorkloadError],
                      bidirectional: bool = False) -> None:
    """`fail(field, problem)` for a transfer the harness cannot model."""
    if connector_type != "nixl":
        raise fail("kv_transfer", "needs the engine's kv_connector of type 'nixl' (got "
                   f"{'no connector' if connector_type is None else repr(connector_type)})")
    if spec.readback_tokens is not None:
        if spec.role != "prefill":
            raise fail("kv_transfer.readback_tokens", "only a 'prefill' request reads a "
                       "decode side's tokens back")
        if not bidirectional:
            raise fail("kv_transfer.readback_tokens", "needs the nixl connector's "
                       "'bidirectional': true (without it upstream claims the tokens and never "
                       "pulls them)")
    pulls = spec.role == "decode" or spec.readback_tokens is not None
    for field, value in (("load_fails", spec.load_fails), ("pull_lost", spec.pull_lost)):
        if value and not pulls:
            raise fail(f"kv_transfer.{field}", "only a 'decode' request or a prefill reading "
                       "back (readback_tokens) pulls KV that can fail or be lost")
    if spec.load_fails and spec.pull_lost:
        raise fail("kv_transfer.pull_lost", "a lost pull never reports, so it cannot also fail")
    for field, present, what in (("after", continues, "continue another request"),
                                 ("stream_end_step", streaming, "be a streaming session"),
                                 ("mm_items", has_mm, "carry multimodal items")):
        if present:
            raise fail(field, f"a P/D request (kv_transfer) cannot {what} yet")


@dataclass(frozen=True, slots=True)
class PDPairSpec:
    """A workload's P/D pair: both instances behind the harness's router (`workloads.pd_pair`
    runs it): the router's latency and the decode instance's overrides of the workload's
    config (None: the prefill instance's value)."""

    router_latency_steps: int = 0
    decode_num_blocks: int | None = None
    decode_max_num_seqs: int | None = None
    decode_max_num_batched_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        decode = {name: value for name, value in (
            ("num_blocks", self.decode_num_blocks), ("max_num_seqs", self.decode_max_num_seqs),
            ("max_num_batched_tokens", self.decode_max_num_batched_tokens))
            if value is not None}
        return {"router_latency_steps": self.router_latency_steps,
                **({"decode": decode} if decode else {})}
