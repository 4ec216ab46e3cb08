"""A request's own caps on the OffloadingConnector.

A client may bound what the CPU tier does for one request through the request's transfer
parameters (upstream's experimental `kv_transfer_params` keys `max_load_tokens` and
`max_offload_tokens`):

* `max_load_tokens`: at most this many tokens past the request's local (GPU) prefix hit are
  loaded from the CPU tier; the hit is then cut to whole chunks.
* `max_offload_tokens`: only the request's first this-many tokens are stored to the CPU tier.

A workload writes them per request as `"offload_limits": {"max_load_tokens": 64}` (either
key, or both). They need the engine's OffloadingConnector (`kv_connector` of type
`offloading`, or a MultiConnector with one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workloads.errors import WorkloadError


@dataclass(frozen=True, slots=True)
class OffloadLimitsSpec:
    """A request's caps (None: no cap of that kind)."""

    max_load_tokens: int | None = None
    max_offload_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in (("max_load_tokens", self.max_load_tokens),
                                              ("max_offload_tokens", self.max_offload_tokens))
                if value is not None}


def check_offload_limits(spec: OffloadLimitsSpec, has_offloading: bool, *, streaming: bool,
                         fail: Callable[[str, str], WorkloadError]) -> None:
    """`fail(field, problem)` for caps the harness cannot model."""
    if not has_offloading:
        raise fail("offload_limits", "needs the engine's kv_connector of type 'offloading' "
                   "(or a 'multi' connector with one): only the OffloadingConnector reads them")
    if spec.max_load_tokens is None and spec.max_offload_tokens is None:
        raise fail("offload_limits", "names no cap (give max_load_tokens, max_offload_tokens "
                   "or both)")
    if streaming:
        raise fail("offload_limits", "a streaming session cannot carry offload limits yet")
