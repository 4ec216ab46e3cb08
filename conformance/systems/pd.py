"""A P/D request's transfer parameters for each system, and what a finished prefill hands on.

A router gives a decode-side request the prefill peer's engine id, address and block ids, and
a prefill-side request only `do_remote_decode` (`workloads.pd`). The peer is modelled, not run:
its engine id, address and block ids are fixed here, the same for both systems. What the
scheduler decides and hands on at a prefill's finish (`HandedOn`: the blocks to read, the
tokens they hold, the prompt's cached tokens) is compared; the connector's own address and
engine id are configuration and are not.
"""

from __future__ import annotations

from typing import Any

from conformance.systems.protocol import HandedOn
from vtwin.errors import UserError
from workloads.model import KVConnectorConfig, RequestSpec

PEER_ENGINE_ID = "vtwin-prefill-peer"
PEER_HOST = "127.0.0.1"
PEER_PORT = 5600
ENGINE_ID = "vtwin-engine"
PUSH_CONNECTOR = "NixlPushConnector"


def upstream_params(request: RequestSpec, block_size: int) -> dict[str, Any] | None:
    """Upstream's `kv_transfer_params` for the request (None: not a P/D request). A decode
    request's peer holds its prompt in blocks numbered from 0 (the worker never reads
    them)."""
    spec = request.kv_transfer
    if spec is None:
        return None
    if spec.role == "prefill" and spec.readback_tokens is None:
        return {"do_remote_decode": True, "do_remote_prefill": False}
    tokens = request.prompt_len if spec.readback_tokens is None else spec.readback_tokens
    peer = {"remote_block_ids": [list(range(-(-tokens // block_size)))],
            "remote_engine_id": PEER_ENGINE_ID, "remote_request_id": request.request_id,
            "remote_host": PEER_HOST, "remote_port": PEER_PORT, "tp_size": 1}
    if spec.role == "prefill":  # a later turn reading the decode side's tokens back
        return {"do_remote_decode": True, "do_remote_prefill": False, **peer,
                "remote_num_tokens": spec.readback_tokens}
    return {"do_remote_prefill": True, "do_remote_decode": False, **peer}


def upstream_transfer_params(request: RequestSpec, block_size: int) -> dict[str, Any] | None:
    """Everything upstream's `kv_transfer_params` carries for the request: its P/D part
    (`upstream_params`) and its own offload caps (`workloads.offload_limits`; read by the
    OffloadingConnector). None: neither."""
    params = {**(upstream_params(request, block_size) or {}),
              **(request.offload_limits.to_dict() if request.offload_limits else {})}
    return params or None


def remote_transfer(request: RequestSpec) -> Any:
    """The twin's `RemoteTransfer` for the request: None where upstream's request has no
    `kv_transfer_params`. A request with offload caps alone has them (`upstream_transfer_params`),
    and upstream's NIXL connector reads any parameters without `do_remote_decode` as a decode
    side's: bidirectional, it keeps the finished request's blocks for a read back. The twin's
    request gets an empty part, so its NIXL connector does the same."""
    from impl.connector.types import RemoteTransfer

    spec = request.kv_transfer
    if spec is None:
        return None if request.offload_limits is None else RemoteTransfer()
    return RemoteTransfer(do_remote_prefill=spec.role == "decode",
                          do_remote_decode=spec.role == "prefill",
                          readback_tokens=spec.readback_tokens)


def handed_on(params: Any) -> HandedOn | None:
    """The compared part of a finished request's transfer parameters: the twin's
    `FinishedTransfer`, upstream's dict, or None."""
    if params is None:
        return None
    if isinstance(params, dict):
        readback = bool(params.get("do_remote_decode"))  # a decode side's, for turn 2
        if not params.get("do_remote_prefill") and not readback:
            return None
        blocks = params.get("remote_block_ids") or ()
        return HandedOn(tuple(tuple(int(b) for b in g) for g in blocks),
                        int(params.get("remote_num_tokens") or 0),
                        params.get("remote_prefill_cached_tokens"), readback)
    return HandedOn(tuple(tuple(g) for g in params.remote_block_ids), params.remote_num_tokens,
                    params.remote_prefill_cached_tokens, params.readback)


def upstream_nixl_config(connector: KVConnectorConfig,
                         connector_class: tuple[str, str] | None) -> Any:
    """Upstream's `KVTransferConfig` for the NIXL connector on a `kv_both` instance (it plays
    either side per request, as `workloads.pd` describes): `NixlConnector` (pull mode) or
    `NixlPushConnector`, refused by a release that has no push mode."""
    from vllm.config import KVTransferConfig

    module, name = connector_class or (None, _nixl_class(connector))
    return KVTransferConfig(kv_connector=name, kv_connector_module_path=module,
                            kv_role="kv_both", engine_id=ENGINE_ID,
                            kv_load_failure_policy=connector.load_failure_policy,
                            kv_connector_extra_config=nixl_extra(connector))


def nixl_extra(connector: KVConnectorConfig) -> dict[str, Any]:
    """The NIXL connector's extra config: turn-2 readback and its threshold, when on."""
    if not connector.bidirectional:
        return {}
    return {"bidirectional_kv_xfer": True,
            "kv_recompute_threshold": connector.recompute_threshold}


def upstream_multi_config(connector: KVConnectorConfig, offloading: dict[str, Any]) -> Any:
    """Upstream's `KVTransferConfig` for a MultiConnector over the NIXL connector and the
    OffloadingConnector (`offloading`: its entry), in the workload's order. The load failure
    policy is the engine's, taken from the NIXL part."""
    from vllm.config import KVTransferConfig

    nixl = connector.part("nixl")
    assert nixl is not None
    entries = [{"kv_connector": _nixl_class(part), "kv_role": "kv_both",
                "kv_connector_extra_config": nixl_extra(part)}
               if part.type == "nixl" else offloading for part in connector.connectors]
    return KVTransferConfig(kv_connector="MultiConnector", kv_role="kv_both",
                            engine_id=ENGINE_ID, kv_load_failure_policy=nixl.load_failure_policy,
                            kv_connector_extra_config={"connectors": entries})


def _nixl_class(connector: KVConnectorConfig) -> str:
    """The NIXL connector class for the transfer mode; one line if the release lacks it."""
    from vllm import __version__ as release
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    name = PUSH_CONNECTOR if connector.transfer_mode == "push" else "NixlConnector"
    if name not in KVConnectorFactory._registry:
        raise UserError(f"kv_connector.transfer_mode={connector.transfer_mode!r}: vLLM "
                        f"{release} has no {name}")
    return name
