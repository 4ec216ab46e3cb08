"""When a request stops, checked after each appended output token.

Order (as upstream 0.32): EOS (unless ignore_eos), then stop token ids (even with ignore_eos),
then the length caps (max_tokens, max_model_len). A token that is both the EOS and the last
allowed token therefore stops with reason "stop", not "length". Only then `min_tokens`: the
sampler never produces EOS or stop tokens before min_tokens outputs, so it gates the last
check alone, repetition detection (`impl.sched.repetition`, reason "repetition").
"""

from __future__ import annotations

from impl.sched.repetition import ends_in_repetition
from impl.sched.request import Request, RequestStatus


def check_stop(request: Request, max_model_len: int) -> bool:
    output_token_ids = request.output_token_ids
    last = output_token_ids[-1]
    eos_token_id = request.eos_token_id
    # Narrowed to an int first: compiled, `int == int | None` is a generic comparison.
    if not request.ignore_eos and eos_token_id is not None and last == eos_token_id:
        request.status = RequestStatus.FINISHED_STOPPED
        return True
    if last in request.stop_token_ids:
        request.status = RequestStatus.FINISHED_STOPPED
        request.stop_reason = last
        return True
    if (request.num_tokens >= max_model_len
            or len(output_token_ids) >= request.max_tokens):
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        return True
    detection = request.repetition_detection
    if detection is None or len(output_token_ids) < request.min_tokens:
        return False
    if ends_in_repetition(output_token_ids, *detection):
        request.status = RequestStatus.FINISHED_REPETITION
        request.stop_reason = "repetition_detected"
        return True
    return False
