"""A planted connector bug for `vtwin connector-check`: SimpleCPUOffloadConnector whose
scheduler side forgets finished loads (it never releases a load's pins), so every block a load
touched stays referenced after its request is gone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector import (
    SimpleCPUOffloadConnector,
)


class LeakyLoadsConnector(SimpleCPUOffloadConnector):  # type: ignore[misc]
    def update_connector_output(self, connector_output: Any) -> None:
        super().update_connector_output(replace(connector_output, finished_recving=None))


from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import (  # noqa: E402
    NixlConnector,
)


class HoardingNixlConnector(NixlConnector):  # type: ignore[misc]
    """A NIXL connector that keeps the blocks of every finished request for a read, aborted
    prefills and decode requests too, without announcing a read: nothing ever frees them."""

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, Any]:
        _, params = super().request_finished(request, block_ids)
        return bool(block_ids), params

    def request_finished_all_groups(self, request: Any, block_ids: Any) -> tuple[bool, Any]:
        _, params = super().request_finished_all_groups(request, block_ids)
        return any(block_ids), params


class MiscountingConnector(SimpleCPUOffloadConnector):  # type: ignore[misc]
    """A CPU tier that reports one token fewer from host memory than it loaded."""

    def get_external_cache_hit_sources(self, request: Any, num_external_tokens: int) -> Any:
        split = super().get_external_cache_hit_sources(request, num_external_tokens)
        return {source: count - 1 for source, count in split.items()}
