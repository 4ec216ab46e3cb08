"""The engine settings the KV-cache plan depends on, with upstream 0.32.0's defaults.

Only what changes the plan is here: the requested block size, the attention backend's smallest
kernel block (it decides window block sizes and how far a mamba hybrid's block size grows), how
long a request may be and how many tokens can be in flight (they size the per-request worst
case the memory check uses), prefix caching (it decides the mamba cache mode and block size),
the override of the block count, the hybrid manager switch and the physical KV-cache layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

DEFAULT_BLOCK_SIZE = 16

# Physical order of the logical axes [L, B, H, N, C] (layer, block, head, state, content bytes):
# entry i names the logical axis stored at physical position i (0 is outermost).
LAYOUTS: MappingProxyType[str, tuple[int, ...]] = MappingProxyType({
    "LBHNC": (0, 1, 2, 3, 4), "LBNHC": (0, 1, 3, 2, 4), "LHBNC": (0, 2, 1, 3, 4),
    "BLHNC": (1, 0, 2, 3, 4), "BLNHC": (1, 0, 3, 2, 4), "BHLNC": (1, 2, 0, 3, 4),
})
AXIS_L, AXIS_B = 0, 1


@dataclass(frozen=True, slots=True)
class Layout:
    """A KV-cache layout and the three properties the planner asks of it."""

    name: str

    @property
    def order(self) -> tuple[int, ...]:
        return LAYOUTS[self.name]

    @property
    def layer_outermost(self) -> bool:
        return self.order[0] == AXIS_L

    @property
    def block_outermost(self) -> bool:
        return self.order[0] == AXIS_B

    @property
    def pages_contiguous(self) -> bool:
        """Each page's [H, N, C] bytes are one run: only L and B are outside it."""
        return set(self.order[:2]) == {AXIS_L, AXIS_B}


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """`block_size` None means the default (16) rather than a user's choice; both plan alike.
    `kernel_block_size` k stands for a backend whose kernels take any multiple of k tokens
    (FlashAttention: 16; vLLM's CPU backend: 32)."""

    block_size: int | None = None
    kernel_block_size: int = 16
    max_model_len: int = 2048
    max_num_batched_tokens: int = 2048
    async_scheduling: bool = False
    enable_prefix_caching: bool = True
    num_gpu_blocks_override: int | None = None
    disable_hybrid_kv_cache_manager: bool = False
    kv_cache_layout: str = "LBHNC"

    def __post_init__(self) -> None:
        for name in ("kernel_block_size", "max_model_len", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1 (got {getattr(self, name)})")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size: must be >= 1 (got {self.block_size})")
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 1:
            raise ValueError("num_gpu_blocks_override: must be >= 1 "
                             f"(got {self.num_gpu_blocks_override})")
        if self.kv_cache_layout not in LAYOUTS:
            raise ValueError(f"kv_cache_layout: unknown {self.kv_cache_layout!r} "
                             f"(known: {', '.join(LAYOUTS)})")

    @property
    def requested_block_size(self) -> int:
        return DEFAULT_BLOCK_SIZE if self.block_size is None else self.block_size

    @property
    def max_num_encoder_input_tokens(self) -> int:
        """The encoder's tokens per step, what a cross-attention layer keeps per request: the
        engine sets it to the step's token budget."""
        return self.max_num_batched_tokens

    @property
    def max_in_flight_tokens(self) -> int:
        """Tokens scheduled but not yet settled: one batch per concurrent step (async
        scheduling overlaps two). Window and chunk groups keep their blocks that long."""
        return self.max_num_batched_tokens * (2 if self.async_scheduling else 1)

    @property
    def layout(self) -> Layout:
        return Layout(self.kv_cache_layout)
