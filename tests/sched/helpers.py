"""Builders for scheduler unit tests: a scheduler, requests, and one engine step."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from impl.core.hashing import make_none_hash
from impl.core.request_hasher import RequestBlockHasher
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from impl.sched.async_scheduler import AsyncScheduler
from impl.sched.config import SchedulerConfig
from impl.sched.output import EngineCoreOutput, ModelRunnerOutput, SchedulerOutput
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler

NONE_HASH = make_none_hash("sha256", "0")
EOS = 2


def make_scheduler(num_blocks: int = 64, block_size: int = 16, asynchronous: bool = False,
                   **config: object) -> Scheduler:
    defaults: dict[str, object] = {"max_num_seqs": 8, "max_num_batched_tokens": 256,
                                   "max_model_len": 1024, "block_size": block_size}
    defaults.update(config)
    scheduler_config = SchedulerConfig(**defaults)  # type: ignore[arg-type]
    kv_config = KVCacheConfig(num_blocks, (
        KVCacheGroupSpec(("layer",), FullAttentionSpec(block_size=block_size)),))
    cls = AsyncScheduler if asynchronous else Scheduler
    return cls(scheduler_config, kv_config, none_hash=NONE_HASH, log_stats=True)


def make_request(request_id: str, prompt: Iterable[int], block_size: int = 16,
                 **kwargs: object) -> Request:
    hasher = RequestBlockHasher(block_size, "sha256", NONE_HASH)
    kwargs.setdefault("eos_token_id", EOS)
    kwargs.setdefault("max_tokens", 16)
    return Request(request_id, prompt, block_hasher=hasher, **kwargs)  # type: ignore[arg-type]


def step(scheduler: Scheduler, token: Callable[[str], list[int]] = lambda _: [7]
         ) -> tuple[SchedulerOutput, list[EngineCoreOutput]]:
    """Schedule, then return a token for every request whose input is complete."""
    output = scheduler.schedule()
    return output, finish(scheduler, output, token)


def finish(scheduler: Scheduler, output: SchedulerOutput,
           token: Callable[[str], list[int]] = lambda _: [7]) -> list[EngineCoreOutput]:
    """Run a scheduled step: a token for every request whose input is complete."""
    req_ids = list(output.num_scheduled_tokens)
    sampled = []
    for req_id in req_ids:
        request = scheduler.requests[req_id]
        done = request.num_computed_tokens >= request.num_tokens
        sampled.append(token(req_id) if done else [])
    runner_output = ModelRunnerOutput(req_ids, {r: i for i, r in enumerate(req_ids)}, sampled)
    results = scheduler.update_from_output(output, runner_output)
    scheduler.kv_cache_manager.check_integrity()
    return results


def scheduled(output: SchedulerOutput) -> dict[str, int]:
    return dict(output.num_scheduled_tokens)
