"""Writing workloads: canonical, compact, byte-for-byte deterministic JSON Lines.

Keys are sorted, separators are compact and the output is ASCII, so the same workload always
gives the same bytes whatever the platform or PYTHONHASHSEED. Request fields equal to their
defaults are left out to keep files small; the header always spells out the whole engine
config so a file documents the run it was made for. Requests that came from a compact prompt
spec are written as that spec, not as their (possibly huge) expanded token ids.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError
from workloads.model import PlanSpec, PromptSpec, RequestSpec, Workload
from workloads.schema import FORMAT_NAME, FORMAT_VERSION


def _encode(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)


def header_record(workload: Workload) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": "header",
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "name": workload.name,
        "description": workload.description,
        "vocab_size": workload.vocab_size,
        "token_seed": workload.token_seed,
        "config": workload.config.to_dict(),
    }
    if workload.step_ms is not None:
        record["step_ms"] = workload.step_ms
    if workload.pd_pair is not None:
        record["pd_pair"] = workload.pd_pair.to_dict()
    return record


def prompt_record(spec: PromptSpec) -> dict[str, Any]:
    record: dict[str, Any] = {}
    if spec.segments:
        record["segments"] = [{"key": s.key, "length": s.length} for s in spec.segments]
    if not spec.segments or spec.length != sum(s.length for s in spec.segments):
        record["length"] = spec.length
    return record


def request_record(request: RequestSpec) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": "request",
        "request_id": request.request_id,
        "max_tokens": request.max_tokens,
    }
    if request.after is None:
        record["arrival_step"] = request.arrival_step
    else:  # its arrival step is the run's to decide
        record["after"] = {"request_id": request.after.request_id,
                           "gap_ms": request.after.gap_ms}
    if request.prompt_spec is not None:
        record["prompt"] = prompt_record(request.prompt_spec)
    else:
        record["prompt_token_ids"] = list(request.prompt_token_ids)
    optional: dict[str, Any] = {
        "min_tokens": (request.min_tokens, 0),
        "stop_token_ids": (list(request.stop_token_ids), []),
        "eos_token_id": (request.eos_token_id, None),
        "ignore_eos": (request.ignore_eos, False),
        "priority": (request.priority, 0),
        "cache_salt": (request.cache_salt, None),
        "lora_name": (request.lora_name, None),
        "job_id": (request.job_id, None),
        "is_last_step": (request.is_last_step, True),
        "kv_cache_report_mode": (request.kv_cache_report_mode, "incremental"),
    }
    for key, (value, default) in optional.items():
        if value != default:
            record[key] = value
    if request.mm_items:
        record["mm_items"] = [item.to_dict() for item in request.mm_items]
    if request.stream:
        record["stream"] = [chunk.to_dict() for chunk in request.stream]
    if request.stream_end_step is not None:
        record["stream_end_step"] = request.stream_end_step
    if request.grammar is not None:
        record["grammar"] = request.grammar.to_dict()
    if request.kv_transfer is not None:
        record["kv_transfer"] = request.kv_transfer.to_dict()
    if request.offload_limits is not None:
        record["offload_limits"] = request.offload_limits.to_dict()
    if request.repetition_detection is not None:
        record["repetition_detection"] = request.repetition_detection.to_dict()
    return record


def plan_record(plan: PlanSpec) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "plan", "request_id": plan.request_id}
    if plan.eos_at is not None:
        record["eos_at"] = plan.eos_at
    if plan.spec_acceptance is not None:
        record["spec_acceptance"] = list(plan.spec_acceptance)
    return record


def dumps(workload: Workload) -> str:
    """The file text: header, then each request followed by its plan, then the aborts, then
    the controls."""
    plans = workload.plans_by_request()
    lines = [_encode(header_record(workload))]
    for request in workload.requests:
        lines.append(_encode(request_record(request)))
        plan = plans.get(request.request_id)
        if plan is not None:
            lines.append(_encode(plan_record(plan)))
    for abort in workload.aborts:
        lines.append(_encode({"type": "abort", "request_id": abort.request_id, "step": abort.step}))
    lines.extend(_encode(control.to_dict()) for control in workload.controls)
    return "\n".join(lines) + "\n"


def dump(workload: Workload, path: str | Path) -> None:
    """Write `workload` to `path` (``-`` means standard output), replacing it atomically."""
    text = dumps(workload)
    if str(path) == "-":
        print(text, end="")
        return
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="ascii", newline="\n")
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise WorkloadError(path, None, None, f"cannot write file: {err.strerror}") from None
