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
