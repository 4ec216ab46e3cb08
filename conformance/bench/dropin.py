"""Drop-in: upstream's engine stepping with the twin's scheduler (`scheduler_cls`) against the
same engine with its own scheduler, on CPU with the end-to-end case's tiny checkpoint.

Both sides are upstream's `vllm.LLM` (its model runner, its CPU attention); "impl" plugs the
twin in through `conformance.runner.scheduler_adapter.ImplSchedulerAdapter`, which translates
requests in and outputs out, so the twin's side pays that translation too (what a
`--scheduler-cls` user would pay). Greedy outputs are checked identical between the two.

The engine core's `schedule`, `update_from_output` and `step_fn` are wrapped with a clock (the
same wrappers on both sides), giving the scheduling time per step and its share of a step:
what the issue's "schedule + update at 11.7% of H100 wall time" means on this machine. A tiny
model on CPU makes the model's share large, so the share is small on both sides; the ms per
step of schedule + update is the number that carries over to a GPU.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .e2e import (
    BLOCK_SIZE,
    MAX_MODEL_LEN,
    NUM_REQUESTS,
    OUTPUT_LEN,
    PROMPT_LEN,
    prompts,
    tiny_checkpoint,
)
from .systems import check_system

ADAPTER = "conformance.runner.scheduler_adapter.ImplSchedulerAdapter"


class _Clock:
    """Seconds spent inside the wrapped callables, and how many calls."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
        return timed


@dataclass(frozen=True, slots=True)
class DropInTiming:
    scheduler: str
    steps: int
    tokens_per_second: float
    sched_ms_per_step: float
    step_ms: float

    @property
    def sched_share(self) -> float:
        """Percent of an engine step spent in schedule + update_from_output."""
        return 100 * self.sched_ms_per_step / self.step_ms

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "sched_share_percent": self.sched_share}

    def line(self) -> str:
        return (f"{self.scheduler:<9} upstream's engine, {self.steps:,} steps: "
                f"{self.tokens_per_second:,.0f} tokens/s, step {self.step_ms:.3f} ms, "
                f"schedule + update {self.sched_ms_per_step:.3f} ms/step "
                f"({self.sched_share:.1f}% of the step)")


def time_dropin(scheduler: str, runs: int = 3) -> DropInTiming:
    """Upstream's engine with `scheduler` ("upstream": its own; "impl": the twin) generating
    `runs` fresh prompt batches after one warm-up batch; torn down before returning."""
    check_system(scheduler)
    from vllm import LLM, SamplingParams

    llm: Any = LLM(model=str(tiny_checkpoint()), skip_tokenizer_init=True, dtype="float32",
                   enforce_eager=True, max_model_len=MAX_MODEL_LEN, max_num_seqs=NUM_REQUESTS,
                   max_num_batched_tokens=NUM_REQUESTS * PROMPT_LEN, block_size=BLOCK_SIZE,
                   seed=0, kv_cache_memory_bytes=256 << 20,
                   scheduler_cls=ADAPTER if scheduler == "impl" else None)
    try:
        params = SamplingParams(max_tokens=OUTPUT_LEN, ignore_eos=True, temperature=0.0,
                                detokenize=False)
        core = llm.llm_engine.engine_core.engine_core  # in process (no multiprocessing)
        scheduling, stepping = _Clock(), _Clock()
        core.scheduler.schedule = scheduling.wrap(core.scheduler.schedule)
        core.scheduler.update_from_output = scheduling.wrap(core.scheduler.update_from_output)
        core.step_fn = stepping.wrap(core.step_fn)
        start = 0.0
        for run in range(runs + 1):
            if run == 1:  # the first batch warms the engine up, outside the clocks
                scheduling.seconds = stepping.seconds = 0.0
                stepping.calls = 0
                start = time.perf_counter()
            batch = prompts(run)
            done = llm.generate([{"prompt_token_ids": p} for p in batch], params,
                                use_tqdm=False)
            _check(scheduler, run, [list(o.outputs[0].token_ids) for o in done])
        elapsed = time.perf_counter() - start
        steps = max(1, stepping.calls)
        return DropInTiming(scheduler, stepping.calls, runs * NUM_REQUESTS * OUTPUT_LEN / elapsed,
                            1e3 * scheduling.seconds / steps, 1e3 * stepping.seconds / steps)
    finally:
        del llm
        gc.collect()


def _check(scheduler: str, run: int, outputs: list[list[int]]) -> None:
    expected = _OUTPUTS.setdefault(run, outputs)
    if outputs != expected:
        raise AssertionError(f"drop-in: upstream's engine with the {scheduler} scheduler "
                             f"decodes prompt batch {run} differently")


_OUTPUTS: dict[int, list[list[int]]] = {}
"""Greedy outputs per prompt batch, from whichever scheduler ran it first."""
