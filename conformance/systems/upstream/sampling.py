"""Sampling parameters the harness hands upstream beyond the basic ones."""

from __future__ import annotations

from typing import Any

from vtwin.errors import UserError
from workloads.repetition import RepetitionDetection


def repetition_detection_params(detection: RepetitionDetection, request_id: str) -> Any:
    """Upstream's `RepetitionDetectionParams` for a request's `repetition_detection`; a release
    without it cannot honour the request, which is refused with one line."""
    try:
        from vllm.sampling_params import RepetitionDetectionParams
    except ImportError as exc:
        raise UserError(f"request {request_id}: repetition_detection needs a vLLM release "
                        "with RepetitionDetectionParams (0.32 or later)") from exc
    return RepetitionDetectionParams(max_pattern_size=detection.max_pattern_size,
                                     min_pattern_size=detection.min_pattern_size,
                                     min_count=detection.min_count)
