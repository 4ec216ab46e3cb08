"""`SchedulerConnector`: what the scheduler asks of a KV connector's scheduler side.

The connectors implement it: the CPU offload tier (`cpu_offload`, upstream's
SimpleCPUOffloadConnector), the OffloadingConnector (`offloading.scheduler`), the NIXL
prefill/decode connector (`nixl`, `nixl_push`), and the MultiConnector over several (`multi`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from impl.connector.multi_metadata import MultiMetadata
    from impl.connector.nixl_metadata import NixlMetadata
    from impl.connector.offloading.jobs import OffloadingMetadata
    from impl.connector.types import FinishedTransfer, KVConnectorOutput, OffloadMetadata
    from impl.core.events import KVCacheEvent
    from impl.core.kv_cache_manager import KVCacheBlocks
    from impl.core.prefix_stats import CacheHitSource
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request


class SchedulerConnector(Protocol):
    group_block_sizes: list[int]
    # Whether its loads complete a local hit on which a group lags behind full attention
    # (P/D beside mamba: the pull brings the state; upstream's
    # `supports_divergent_local_hybrid_hits`).
    completes_lagging_groups: bool

    def on_new_request(self, request: Request) -> None:
        """A request arrived (before any lookup)."""

    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        """Tokens past the local hit the connector supplies (None: ask again next step) and
        whether they arrive asynchronously."""

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None: ...

    def get_external_cache_hit_sources(self, request: Request,
                                       num_external_tokens: int) -> dict[CacheHitSource, int]:
        """The admitted request's `num_external_tokens` split by the tier each came from (asked
        once its load is planned, for the connector's prefix-cache stats; no zero counts)."""

    def build_connector_meta(self, output: SchedulerOutput
                             ) -> (OffloadMetadata | OffloadingMetadata | NixlMetadata
                                   | MultiMetadata): ...

    def update_connector_output(self, output: KVConnectorOutput) -> None: ...

    def request_finished(self, request: Request, block_ids: tuple[list[int], ...]
                         ) -> tuple[bool, FinishedTransfer | None]:
        """The request finished; True if its blocks must outlive it, and what its output
        hands a P/D peer (None: nothing)."""

    def has_pending_stores(self) -> bool:
        """Transfers in flight that the engine must keep stepping to hear of."""

    def gpu_pins(self) -> dict[int, int]:
        """GPU block id -> references the connector holds on it."""

    def cpu_counts(self) -> tuple[int, int, int] | None:
        """The CPU tier's (active, cached, empty) blocks or chunks (None: no CPU tier)."""

    def loading_finished(self) -> set[str]:
        """Finished requests whose load is still in flight (they keep their blocks)."""

    def reset_cache(self) -> bool | None:
        """An operator's reset of the connector's own cache: False if refused, None if it
        keeps none."""

    def take_events(self) -> list[KVCacheEvent]:
        """KV events of the connector's own tier since the last call (none without one)."""

    def check_integrity(self) -> None: ...
