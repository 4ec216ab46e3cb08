"""Every malformed workload file is rejected with one line naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import main
from workloads import WorkloadError, load_file

HERE = Path(__file__).resolve().parent / "malformed"

# file name -> (line, field or None when no single field is at fault, message substring)
CASES: dict[str, tuple[int, str | None, str]] = {
    "abort_before_arrival.jsonl": (3, "step", "comes before request 'r1' arrives at step 10"),
    "abort_twice.jsonl": (4, "request_id", "already aborted on line 3"),
    "abort_unknown_id.jsonl": (3, "request_id", "abort of unknown request 'ghost'"),
    "arrival_ms_without_step_ms.jsonl": (2, "arrival_ms", "needs 'step_ms' in the header"),
    "after_and_arrival_step.jsonl": (2, "arrival_step", "exactly one of 'arrival_step', "
                                     "'arrival_ms' and 'after'"),
    "after_cycle.jsonl": (3, "after.request_id", "arrival cycle: a -> c -> b -> a"),
    "after_negative_gap.jsonl": (3, "after.gap_ms", "greater than or equal to 0 (got -5)"),
    "after_prompt_too_long.jsonl": (3, "prompt", "request 'b': its prompt can grow to 70 "
                                    "tokens"),
    "after_unknown.jsonl": (3, "after.request_id", "'b' follows unknown request 'ghost'"),
    "after_without_step_ms.jsonl": (3, "after", "needs 'step_ms' in the header"),
    "continuum_without_step_ms.jsonl": (1, "config.continuum", "needs 'step_ms' in the header"),
    "bad_hash_algo.jsonl": (1, "config.hash_algo", "got 'md5'"),
    "bad_json.jsonl": (2, None, "invalid JSON at column 37"),
    "bad_policy.jsonl": (1, "config.policy", "got 'lifo'"),
    "retention_interval_off_grid.jsonl": (1, "config.prefix_cache_retention_interval",
                                          "a multiple of the block size 16 (got 40)"),
    "retention_interval_no_window.jsonl": (1, "config.prefix_cache_retention_interval",
                                           "an interval needs a sliding-window or mamba group"),
    "batched_below_seqs.jsonl": (1, "config.max_num_batched_tokens", ">= max_num_seqs 64"),
    "bool_priority.jsonl": (2, "priority", "valid integer (got True)"),
    "both_prompt_forms.jsonl": (2, "prompt", "exactly one of 'prompt' and 'prompt_token_ids'"),
    "control_mode_on_reset.jsonl": (3, "mode", "'reset_prefix_cache' must not set 'mode'"),
    "control_pause_forever.jsonl": (3, "action", "a pause with no later 'unpause'"),
    "control_preempt_on_pause.jsonl": (3, "preempt_running", "only for 'reset_prefix_cache'"),
    "control_reset_connector_on_pause.jsonl": (3, "reset_connector",
                                               "only for 'reset_prefix_cache'"),
    "control_unknown_action.jsonl": (3, "action", "got 'restart'"),
    "dcp_with_pd.jsonl": (1, "config.kv_connector.type", "upstream refuses P/D with DCP"),
    "data_parallel_without_interval.jsonl": (1, "config.data_parallel",
                                             "needs prefill_schedule_interval > 1"),
    "duplicate_id.jsonl": (3, "request_id", "duplicate request id 'r1' (first on line 2)"),
    "duplicate_key.jsonl": (2, "max_tokens", "key appears twice"),
    "empty.jsonl": (1, "type", "missing header"),
    "empty_prompt_ids.jsonl": (2, "prompt_token_ids", "at least 1 item"),
    "eos_at_past_max_tokens.jsonl": (3, "eos_at", "past the last output index 3"),
    "float_arrival_step.jsonl": (2, "arrival_step", "valid integer (got 1.5)"),
    "grammar_one_bound.jsonl": (2, "grammar.allowed", "at least 2 items"),
    "grammar_only_eos.jsonl": (2, "grammar.allowed", "holds only the request's EOS and stop"),
    "grammar_out_of_vocab.jsonl": (2, "grammar.allowed", "[30, 70) is not a non-empty range "
                                   "inside the vocabulary [0, 64)"),
    "grammar_session.jsonl": (2, "grammar", "a streaming session cannot carry a grammar"),
    "pooling_max_tokens.jsonl": (2, "max_tokens", "must be 1 under runner 'pooling'"),
    "pooling_plan.jsonl": (3, "type", "its requests take no plan"),
    "pooling_spec.jsonl": (1, "config.num_spec_tokens", "must be off with runner 'pooling'"),
    "pooling_report_mode.jsonl": (2, "kv_cache_report_mode", "not for a pooling request"),
    "report_mode_unknown.jsonl": (2, "kv_cache_report_mode", "'incremental' or 'full'"),
    "mm_mask_length.jsonl": (2, "mm_items[0].is_embed", "has 2 entries, not length 3"),
    "mm_overlap.jsonl": (2, "mm_items[1].offset", "overlaps the item before it"),
    "mm_past_prompt.jsonl": (2, "mm_items[0].length", "run past the prompt's 40 tokens"),
    "mm_too_big.jsonl": (2, "mm_items[0]", "50 embeddings exceed config.multimodal's"),
    "mm_without_config.jsonl": (2, "mm_items", "needs config.multimodal"),
    "mm_zero_length.jsonl": (2, "mm_items[0].length", "greater than or equal to 1"),
    "min_over_max.jsonl": (2, "min_tokens", "9 is more than max_tokens 4"),
    "missing_header.jsonl": (1, "type", "missing header"),
    "missing_max_tokens.jsonl": (2, "max_tokens", "required field is missing"),
    "nan_value.jsonl": (2, None, "NaN is not valid JSON"),
    "negative_max_tokens.jsonl": (2, "max_tokens", "greater than or equal to 1 (got -1)"),
    "negative_prompt_length.jsonl": (2, "prompt.length", "greater than or equal to 1 (got -5)"),
    "no_arrival.jsonl": (2, "arrival_step", "exactly one of 'arrival_step', 'arrival_ms' and"),
    "not_an_object.jsonl": (2, None, "must be a JSON object, got list"),
    "not_utf8.jsonl": (2, None, "not valid UTF-8"),
    "num_blocks_too_small.jsonl": (1, "config.num_blocks", "cannot hold one request"),
    "plan_eos_without_eos_token.jsonl": (3, "eos_at", "has no eos_token_id"),
    "plan_unknown_id.jsonl": (3, "request_id", "plan for unknown request 'ghost'"),
    "prompt_too_long.jsonl": (2, "prompt.length", "exceeds config.max_model_len 2048"),
    "bounded_replay_on_full.jsonl": (1, "config.kv_cache_groups[0]",
                                     "must not set 'bounded_replay'"),
    "bounded_replay_two_windows.jsonl": (1, "config.kv_cache_groups", "one sliding_window"),
    "bounded_replay_alone.jsonl": (1, "config.kv_cache_groups", "keeps a prefix cache"),
    "bounded_replay_with_connector.jsonl": (1, "config.kv_connector", "not modelled yet"),
    "eagle_without_spec.jsonl": (1, "config.spec_method", "needs num_spec_tokens > 0"),
    "mtp_modules_without_mtp.jsonl": (1, "config.mtp_modules", "only with spec_method 'mtp'"),
    "repetition_min_count.jsonl": (2, "repetition_detection.min_count", "must be >= 2"),
    "repetition_min_above_max.jsonl": (2, "repetition_detection.min_pattern_size",
                                       "must not exceed max_pattern_size"),
    "eagle_lookahead_mismatch.jsonl": (1, "config.num_lookahead_tokens", "must be 2"),
    "eagle_with_chunked_local.jsonl": (1, "config.kv_cache_groups[1]",
                                       "with spec_method 'eagle'"),
    "eagle_unknown_method.jsonl": (1, "config.spec_method", "'ngram', 'eagle' or 'mtp'"),
    "circular_buffer_alone.jsonl": (1, "config.kv_cache_groups", "keeps a prefix cache"),
    "circular_buffer_with_connector.jsonl": (1, "config.kv_connector", "not modelled yet"),
    "cross_attention_with_prefix_caching.jsonl": (1, "config.enable_prefix_caching",
                                                  "no prefix cache"),
    "cross_attention_alone.jsonl": (1, "config.kv_cache_groups", "the decoder's own group"),
    "cross_attention_without_encoder.jsonl": (1, "config.multimodal", "needs config.multimodal"),
    "cross_attention_beside_mamba.jsonl": (1, "config.kv_cache_groups",
                                           "'mamba' group beside cross_attention"),
    "cross_attention_with_spec.jsonl": (1, "config.num_spec_tokens", "not modelled"),
    "cross_attention_with_chunked_prefill.jsonl": (1, "config.enable_chunked_prefill",
                                                   "upstream turns it off"),
    "cross_attention_chunked_mm_input.jsonl": (1, "config.multimodal.disable_chunked_mm_input",
                                               "must be true"),
    "encoder_input_off_zero.jsonl": (2, "mm_items[0].offset", "sits at offset 0"),
    "encoder_inputs_two.jsonl": (2, "mm_items", "one encoder input"),
    "encoder_input_too_long.jsonl": (2, "mm_items[0]", "could never run it"),
    "mm_item_modalities_disabled.jsonl": (2, "mm_items[0]", "every modality is disabled"),
    "mm_item_past_largest.jsonl": (2, "mm_items[0]", "exceed config.multimodal."
                                   "max_tokens_per_item 30"),
    "rswa_window_missing.jsonl": (1, "config.kv_cache_groups[1]", "needs 'rswa_window'"),
    "rswa_window_on_full.jsonl": (1, "config.kv_cache_groups[0]", "must not set 'rswa_window'"),
    "second_header.jsonl": (3, "type", "a second header"),
    "segments_longer_than_prompt.jsonl": (2, "prompt.length", "shorter than its segments"),
    "sliding_window_missing.jsonl": (1, "config.kv_cache_groups[1]", "needs 'sliding_window'"),
    "spec_acceptance_over_k.jsonl": (3, "spec_acceptance[1]", "exceed config.num_spec_tokens 2"),
    "spec_acceptance_without_spec.jsonl": (3, "spec_acceptance", "spec decode is off"),
    "string_max_tokens.jsonl": (2, "max_tokens", "valid integer (got '10')"),
    "token_out_of_vocab.jsonl": (2, "prompt_token_ids[2]", "not below vocab_size 32000"),
    "unknown_field.jsonl": (2, "max_token", "unknown field"),
    "unknown_record_type.jsonl": (3, "type", "unknown record type 'pause'"),
    "unknown_version.jsonl": (1, "version", "unsupported format version 2"),
    "wrong_format.jsonl": (1, "format", "not a vtwin workload"),
    "zero_segment_length.jsonl": (2, "prompt.segments[0].length", "greater than or equal to 1"),
}


def expected_prefix(path: Path, line: int, field: str | None) -> str:
    return f"{path}:{line}: " + ("" if field is None else f"field '{field}': ")


def test_corpus_is_complete() -> None:
    on_disk = {p.name for p in HERE.iterdir() if p.is_file()}
    assert on_disk == set(CASES)
    assert len(CASES) >= 15


@pytest.mark.parametrize("name", sorted(CASES))
def test_rejected_with_line_and_field(name: str) -> None:
    line, field, text = CASES[name]
    path = HERE / name
    with pytest.raises(WorkloadError) as caught:
        load_file(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(expected_prefix(path, line, field)), message
    assert text in message
    assert caught.value.line == line
    assert caught.value.field == field


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_prints_one_line_without_traceback(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line, field, text = CASES[name]
    path = HERE / name
    assert main(["workloads", "show", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("vtwin: error: " + expected_prefix(path, line, field))
    assert text in err
    assert "Traceback" not in err
