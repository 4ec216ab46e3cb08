"""Multimodal requests: images shown as placeholder runs, encoded under a budget into a cache.

A few images (some with break tokens between rows, which take no embedding) appear in the
prompts of many requests, one to three per prompt, at varying places after a shared system
prompt; the same image always brings the same placeholder tokens, so two requests showing it
at the same place share blocks, and one showing it twice shares its encoder output with itself.
The encoder's per-step budget and its cache are small next to the images, so items wait for
budget, the cache evicts the oldest unreferenced entries, and a chunk stops right before an
image it cannot encode yet; a tight KV pool adds preemptions, which give encoder references
back. Requests carry priorities for the suite's priority variant (where a preemption can
take back a request scheduled earlier in the same step, and its encoder budget returns).
Some images start with tokens that take no embedding (a start marker), so a chunk can cover
placeholders without encoding anything. One client reuses an image id for an image
of another size: upstream finishes that request with an error instead of serving stale
embeddings. New weights arrive mid-run: the encoder cache is reset. A final burst has an
image request the encoder budget cannot take in its step ahead of a text request.

`multimodal-unchunked` runs the same shape with `disable_chunked_mm_input`: a chunk may not
end inside an image, and a chunk that would has to stop before it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from workloads.controls import ControlSpec
from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, Segment, Workload
from workloads.multimodal import MultimodalConfig, MultimodalItem

FAMILY = "multimodal"
SUMMARY = "shared images under a tight encoder budget and cache, evictions and preemptions"
UNCHUNKED_FAMILY = "multimodal-unchunked"
UNCHUNKED_SUMMARY = "multimodal with disable_chunked_mm_input: chunks never split an image"


@dataclass(frozen=True, slots=True)
class Image:
    identifier: str
    segment: Segment
    is_embed: tuple[bool, ...] | None


def _images(rng: random.Random, count: int) -> list[Image]:
    images = []
    for index in range(count):
        length = rng.choice((24, 40, 57, 72, 96))
        mask = None
        if rng.random() < 0.4:  # rows of embeddings, each followed by a break token
            row = rng.choice((7, 11))
            mask = tuple((i % (row + 1)) != row for i in range(length))
        elif rng.random() < 0.3:  # a start marker and a few tokens without an embedding first
            lead = rng.randint(2, 6)
            mask = tuple(i >= lead for i in range(length))
        images.append(Image(f"img-{index}", seg(f"image-{index}", length), mask))
    return images


def _workload(seed: int, scale: float, name: str, family: str, summary: str,
              unchunked: bool) -> Workload:
    rng = rng_for(family, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=65,
        max_num_seqs=8,
        # Unchunked: a step's budget only just fits the largest image, so a request whose chunk
        # reaches an image behind others' chunks often has too little left to cover it.
        max_num_batched_tokens=100 if unchunked else 160,
        max_model_len=1024,
        multimodal=MultimodalConfig(max_num_encoder_input_tokens=120, encoder_cache_size=200,
                                    disable_chunked_mm_input=unchunked),
    )
    builder = WorkloadBuilder(name, f"{family} (seed {seed}, scale {scale:g}): {summary}",
                              config, token_seed=seed)
    images = _images(rng, 6)
    systems = [seg(f"system-{i}", rng.randint(20, 50)) for i in range(2)]
    count = scaled(24, scale)
    previous_segments: list[Segment] = []
    previous_items: tuple[MultimodalItem, ...] = ()
    previous_arrival = 0
    for index, arrival in enumerate(poisson_arrivals(rng, count, rate=0.5)):
        segments: list[Segment] = [rng.choice(systems)]
        items: list[MultimodalItem] = []
        offset = segments[0].length
        shown = rng.sample(images, rng.choice((0, 1, 1, 2, 3))) if index % 7 else []
        if shown and rng.random() < 0.2:
            shown.append(shown[0])  # the same image twice in one prompt
        for image in shown:
            if rng.random() < 0.5:  # some text between images
                text = seg(f"text-{rng.randint(0, 3)}", rng.randint(3, 20))
                segments.append(text)
                offset += text.length
            items.append(MultimodalItem(image.identifier, offset, image.segment.length,
                                        image.is_embed))
            segments.append(image.segment)
            offset += image.segment.length
        if index == count // 2 and previous_items:
            # A client reusing an id for another image, while the first is in the cache.
            segments, items, arrival = previous_segments, list(previous_items), previous_arrival
            first = items[0]
            items[0] = MultimodalItem(first.identifier, first.offset, first.length - 1)
        if items:
            previous_segments, previous_items, previous_arrival = segments, tuple(items), arrival
        builder.request(f"mm-{index:04d}", arrival, segments, rng.randint(4, 30),
                        rng.randint(4, 40), mm_items=tuple(items),
                        priority=0 if unchunked else rng.randint(0, 2))
        if index == count // 3:  # new weights: every cached embedding is stale
            builder.control(ControlSpec(arrival + 2, "reset_encoder_cache"))
        last = arrival
    _burst(builder, last + 150)
    return builder.build()


def _burst(builder: WorkloadBuilder, step: int) -> None:
    """Three requests at once into an idle engine: two images of 72 embeddings each, which
    the 120-embedding budget cannot encode in one step, and a text request. The second image
    starts its prompt, so its chunk is cut to nothing: vLLM 0.32 stops admission there, 0.33
    skips it and admits the text request behind it in the same step."""
    for index in range(2):
        image = seg(f"burst-image-{index}", 72)
        builder.request(f"burst-{index}", step, [image], 8, 8,
                        mm_items=(MultimodalItem(f"burst-{index}", 0, 72),))
    builder.request("burst-text", step, [seg("burst-text", 40)], 0, 8)


def generate(seed: int, scale: float, name: str) -> Workload:
    return _workload(seed, scale, name, FAMILY, SUMMARY, unchunked=False)


def unchunked(seed: int, scale: float, name: str) -> Workload:
    return _workload(seed, scale, name, UNCHUNKED_FAMILY, UNCHUNKED_SUMMARY, unchunked=True)
