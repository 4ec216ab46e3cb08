"""Encoder-decoder transcription (Whisper-style): audio encoded once, then decoded against it.

Each request carries one audio input whose encoder output (utterances of a few lengths, scaled
down from Whisper's 1,500 frames) is written into the decoder's cross-attention blocks on the
request's first step; its decoder prompt is a handful of task tokens and it generates a
transcript of a few dozen tokens. The encoder's per-step budget takes two or three utterances,
so a burst of arrivals is admitted a few at a time (a request whose audio the budget cannot
take gets no tokens that step, and admission stops behind it); the KV pool is tight, so
running requests are preempted, give back their cross-attention blocks and encode their audio
again when they resume. A few text-only requests (no encoder input) run beside them, one
request is aborted mid-decode, and the encoder cache is reset once (new weights). A decoder
with a sliding window (`encoder-decoder-window`) keeps only its recent self-attention blocks
while the cross-attention blocks stay for the whole request, under the priority policy (a
preemption can take back a request scheduled earlier in the same step, its encoder room too).
"""

from __future__ import annotations

from workloads.controls import ControlSpec
from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, KVCacheGroup, Workload
from workloads.multimodal import MultimodalConfig, MultimodalItem

FAMILY = "encoder-decoder"
SUMMARY = "Whisper-style transcription: audio encoded into cross-attention blocks, preemptions"
WINDOW_FAMILY = "encoder-decoder-window"
WINDOW_SUMMARY = "encoder-decoder with a sliding-window decoder beside the cross-attention"

UTTERANCE_LENGTHS = (48, 75, 100, 150, 200)


def _workload(seed: int, scale: float, name: str, family: str, summary: str,
              window: bool) -> Workload:
    rng = rng_for(family, seed)
    decoder = KVCacheGroup("sliding_window", sliding_window=32) if window else KVCacheGroup()
    config = EngineConfig(
        block_size=16,
        num_blocks=72,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        max_model_len=256,
        # What upstream's engine sets for an encoder-decoder model: no prefix cache, a prompt
        # and its audio scheduled whole.
        enable_prefix_caching=False,
        enable_chunked_prefill=False,
        kv_cache_groups=(decoder, KVCacheGroup("cross_attention")),
        multimodal=MultimodalConfig(max_num_encoder_input_tokens=400, encoder_cache_size=400,
                                    disable_chunked_mm_input=True),
        policy="priority" if window else "fcfs",
    )
    builder = WorkloadBuilder(name, f"{family} (seed {seed}, scale {scale:g}): {summary}",
                              config, token_seed=seed)
    task = seg("transcribe-task", 4)
    count = scaled(28, scale)
    last = 0
    for index, arrival in enumerate(poisson_arrivals(rng, count, rate=0.8)):
        request_id = f"asr-{index:04d}"
        if index % 9 == 4:  # a text-only request (no encoder input)
            builder.request(request_id, arrival, [task], rng.randint(2, 30), rng.randint(4, 40),
                            priority=rng.randint(0, 2))
            continue
        frames = rng.choice(UTTERANCE_LENGTHS)
        audio = MultimodalItem(f"audio-{index}", 0, frames, modality="audio")
        builder.request(request_id, arrival, [task], rng.randint(0, 6), rng.randint(8, 90),
                        mm_items=(audio,), priority=rng.randint(0, 2))
        if index == count // 2:
            builder.abort(request_id, arrival + 12)
        if index == count // 3:  # new weights: the encoder cache is reset
            builder.control(ControlSpec(arrival + 3, "reset_encoder_cache"))
        last = arrival
    # A burst: more audio than one step's encoder budget, into a busy engine.
    for index in range(5):
        audio = MultimodalItem(f"burst-audio-{index}", 0, 150 + 10 * index, modality="audio")
        builder.request(f"burst-{index}", last + 2, [task], 2, 30, mm_items=(audio,))
    return builder.build()


def generate(seed: int, scale: float, name: str) -> Workload:
    return _workload(seed, scale, name, FAMILY, SUMMARY, window=False)


def window(seed: int, scale: float, name: str) -> Workload:
    return _workload(seed, scale, name, WINDOW_FAMILY, WINDOW_SUMMARY, window=True)
