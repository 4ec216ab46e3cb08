"""The encoder's part of a `StepRecord` in JSON (multimodal models): which items each request
encodes, the entries evicted for the worker to drop, the encoder cache after the step, and
(with iteration details logged) the step's count of encoder inputs and their embeddings.
Left out entirely for a text-only run, so its records, traces and golden files keep their
bytes."""

from __future__ import annotations

from typing import Any

from conformance.systems.protocol import EncoderCacheCounts


def encoder_json(inputs: tuple[tuple[str, tuple[int, ...]], ...], freed: tuple[str, ...],
                 cache: EncoderCacheCounts | None,
                 stats: tuple[int, int] | None = None) -> dict[str, Any]:
    """A `StepRecord`'s encoder fields in JSON (nothing when the model has no encoder)."""
    if cache is None and not inputs and not freed:
        return {}
    return {
        "encoder_inputs": {rid: list(ids) for rid, ids in inputs},
        "freed_encoder_ids": list(freed),
        "encoder_cache": None if cache is None else {
            "free": cache.free, "freeable": cache.freeable, "entries": list(cache.entries)},
        **({} if stats is None else {"encoder_input_stats": {"num_inputs": stats[0],
                                                             "output_tokens": stats[1]}}),
    }


def encoder_fields(data: dict[str, Any]) -> dict[str, Any]:
    """`StepRecord` keyword arguments from `encoder_json`'s keys (absent: the defaults)."""
    out: dict[str, Any] = {}
    if data.get("encoder_inputs"):
        out["encoder_inputs"] = tuple((rid, tuple(ids))
                                      for rid, ids in data["encoder_inputs"].items())
    if data.get("freed_encoder_ids"):
        out["freed_encoder_ids"] = tuple(data["freed_encoder_ids"])
    stats = data.get("encoder_input_stats")
    if stats is not None:
        out["encoder_input_stats"] = (stats["num_inputs"], stats["output_tokens"])
    cache = data.get("encoder_cache")
    if cache is not None:
        out["encoder_cache"] = EncoderCacheCounts(cache["free"], cache["freeable"],
                                                  tuple(cache["entries"]))
    return out
