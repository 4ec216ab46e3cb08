"""What the installed vLLM can be handed: config fields and scheduler members, by capability.

The adapters build one configuration for every release; a release that lacks a field must
never be handed it (0.19.1's pydantic `SchedulerConfig` rejects `prefill_schedule_interval`,
a 0.32 field, and the whole system then fails to build). So every field the harness sets on an
upstream config is a `Knob` here, and `honour` passes a knob only to a config class that has
it. A workload that leaves the knob at its default loses nothing where the release lacks it;
one that sets another value is refused for that release with one line naming the field and
the release (the release cannot honour it, and silently dropping it would compare something
else).

The members the adapters call on upstream's scheduler are listed per era the same way and
checked when the system is built (`check_members`), so a release without one is "could not be
built: vLLM X has no Scheduler.Y" at start-up, not an AttributeError at the first step.

| knob                          | config class      | workload field                | default |
| ----------------------------- | ----------------- | ----------------------------- | ------- |
| `prefill_schedule_interval`   | `SchedulerConfig` | `prefill_schedule_interval`   | 1       |
| `mamba_cache_mode`            | `CacheConfig`     | the mamba groups' cache mode  | "none"  |
| `hash_block_size`             | `KVCacheConfig`   | `hash_block_size`             | block   |
| `hash_block_size`             | `Scheduler`       | `hash_block_size`             | block   |
| `prefix_cache_retention_interval` | `KVCacheConfig` | `prefix_cache_retention_interval` | None |
| `enable_mamba_shared_prefix_checkpoint` | `CacheConfig` | the same name | False |
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vtwin.errors import UserError
from workloads.model import EngineConfig


@dataclass(frozen=True, slots=True)
class Knob:
    """One field the harness may set on an upstream config class."""

    owner: str
    """The upstream class that takes it (`SchedulerConfig`, `CacheConfig`, `KVCacheConfig`)."""
    field: str
    """Its name there."""
    workload_field: str
    """What a workload calls it (`config.FIELD` in the workload file)."""
    default: Callable[[EngineConfig], Any]
    """The value that means "not set" for this workload (a release without the field behaves
    as if it had this value)."""


KNOBS: tuple[Knob, ...] = (
    Knob("SchedulerConfig", "prefill_schedule_interval", "prefill_schedule_interval",
         lambda _config: 1),
    Knob("SchedulerConfig", "long_prefill_token_threshold_adaptive",
         "long_prefill_token_threshold_adaptive", lambda _config: False),
    Knob("CacheConfig", "mamba_cache_mode", "kv_cache_groups[].mamba_cache_mode",
         lambda _config: "none"),
    Knob("KVCacheConfig", "hash_block_size", "hash_block_size",
         lambda config: config.scheduler_block_size),
    Knob("Scheduler", "hash_block_size", "hash_block_size",
         lambda config: config.scheduler_block_size),
    Knob("KVCacheConfig", "prefix_cache_retention_interval", "prefix_cache_retention_interval",
         lambda _config: None),
    Knob("CacheConfig", "enable_mamba_shared_prefix_checkpoint",
         "enable_mamba_shared_prefix_checkpoint", lambda _config: False),
)


def fields_of(cls: Any) -> frozenset[str]:
    """The keyword arguments a config class accepts: a pydantic model's fields, a
    dataclass's (pydantic dataclasses included), else its constructor's parameters."""
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, Mapping):
        return frozenset(model_fields)
    pydantic_fields = getattr(cls, "__pydantic_fields__", None)
    if isinstance(pydantic_fields, Mapping):
        return frozenset(pydantic_fields)
    if dataclasses.is_dataclass(cls):
        return frozenset(f.name for f in dataclasses.fields(cls))
    if isinstance(cls, type):
        # A subclass whose constructor passes `**kwargs` up (0.19.1's AsyncScheduler) accepts
        # what the first constructor up its MRO that names its parameters accepts.
        for klass in cls.__mro__:
            init = vars(klass).get("__init__")
            if init is None:
                continue
            names = _parameters(init)
            if "**" not in names:
                return names
        return frozenset({"**"})
    return _parameters(cls)


def _parameters(function: Any) -> frozenset[str]:
    parameters = inspect.signature(function).parameters.values()
    names = frozenset(p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL,
                                                                  p.VAR_KEYWORD))
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return names | {"**"}
    return names


def honour(cls: Any, kwargs: dict[str, Any], config: EngineConfig, release: str,
           owner: str | None = None) -> dict[str, Any]:
    """`kwargs` for `cls(...)`, without the knobs `cls` lacks in `release`; a knob the
    workload set to something other than its default, which `cls` lacks, is a `UserError`
    naming the field and the release (the system is then refused for that workload)."""
    accepted = fields_of(cls)
    if "**" in accepted:
        return kwargs
    owner = owner or getattr(cls, "__name__", str(cls))
    kept = dict(kwargs)
    for knob in KNOBS:
        if knob.owner != owner or knob.field not in kept or knob.field in accepted:
            continue
        value = kept.pop(knob.field)
        default = knob.default(config)
        if value != default:
            raise UserError(
                f"config.{knob.workload_field}={value!r}: vLLM {release} cannot honour it "
                f"({owner} has no field {knob.field!r}; leave it at {default!r} for this "
                "release)")
    return kept


SCHEDULER_MEMBERS: tuple[str, ...] = (
    "add_request", "finish_requests", "has_requests", "schedule", "update_from_output",
    "update_draft_token_ids", "kv_cache_manager", "requests", "waiting",
)
"""What every era's adapter calls or reads on upstream's scheduler object."""


def check_members(scheduler: Any, members: tuple[str, ...], release: str) -> None:
    """A `UserError` naming every member `members` lists that `scheduler` lacks."""
    missing = [m for m in members if not hasattr(scheduler, m)]
    if missing:
        raise UserError(f"vLLM {release}: {type(scheduler).__name__} has no "
                        f"{', '.join(missing)} (the adapter for this release calls them)")
