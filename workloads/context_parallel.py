"""Context parallelism: what a workload may ask for.

Decode context parallelism (DCP, `decode_context_parallel_size` N) shards every sequence's
attention KV over N ranks by token position. The scheduler still keeps one block table per
group, but each of its blocks now holds `block_size` tokens on every rank, so the scheduler
sees blocks of `block_size` x N tokens (`impl.core.context_parallel`). Upstream shards
full-attention groups and keeps mamba states and draft groups replicated; its hybrid
coordinator refuses a sharded window. The twin models full attention and mamba 'align' groups
(hashed at the block size, so hits may end inside the coarser full-attention blocks), so any
other group type beside DCP is refused here with one line, and so is a mamba group whose
states upstream cannot hash under DCP (another cache mode, or prefix caching off: its block
no longer divides the hash block, and upstream's coordinator asserts).

Prefill context parallelism (PCP) has no field: upstream's scheduler hands its KV-cache manager
a PCP size of 1, so PCP changes nothing the scheduler decides, and upstream refuses it on the
V1 model runner, the only one a CPU oracle has, so nothing could be compared.
"""

from __future__ import annotations

from collections.abc import Callable

from workloads.errors import WorkloadError
from workloads.schema import EngineConfigModel


def check_context_parallel(model: EngineConfigModel,
                           fail: Callable[[str, str], WorkloadError]) -> None:
    """Refuse, naming the field, what the twin does not model beside DCP."""
    dcp = model.decode_context_parallel_size
    if dcp == 1:
        return
    for index, group in enumerate(model.kv_cache_groups):
        if group.type == "mamba":
            if group.mamba_cache_mode != "align" or not model.enable_prefix_caching:
                raise fail(f"kv_cache_groups[{index}].mamba_cache_mode", f"a mamba group with "
                           f"decode_context_parallel_size {dcp} needs 'align' and prefix "
                           "caching on (otherwise its state block does not divide the hash "
                           "block and upstream refuses the config)")
        elif group.type != "full":
            raise fail(f"kv_cache_groups[{index}].type",
                       f"a {group.type!r} group with decode_context_parallel_size {dcp} is not "
                       "modelled (DCP is twinned for full attention and mamba 'align')")
    connector = model.kv_connector
    if connector is not None and (connector.type == "nixl" or connector.type == "multi"):
        raise fail("kv_connector.type", f"{connector.type!r} with decode_context_parallel_size "
                   f"{dcp}: upstream refuses P/D with DCP for models other than MLA ones")
    for field, value in (("model", model.model),
                         ("hash_block_size", model.hash_block_size)):
        if value is not None:
            raise fail(field, f"must be unset with decode_context_parallel_size {dcp} "
                       "(not modelled with DCP)")
