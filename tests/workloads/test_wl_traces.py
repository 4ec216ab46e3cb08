"""Trace replays: malformed traces, the Mooncake sharing equality, the time model, selection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from workloads import ReplayOptions, Workload, WorkloadError, from_trace, load, prefix_sharing
from workloads.registry import AZURE_TRACE, MOONCAKE_TRACE
from workloads.traces import azure, mooncake

HERE = Path(__file__).resolve().parent / "malformed_traces"

# file name -> (line, field or None, message substring)
TRACE_CASES: dict[str, tuple[int, str | None, str]] = {
    "azure_bad_timestamp.csv": (3, "TIMESTAMP", "got 'yesterday at noon'"),
    "azure_empty.csv": (1, "TIMESTAMP", "missing header row"),
    "azure_header_only.csv": (2, None, "no data rows"),
    "azure_impossible_date.csv": (2, "TIMESTAMP", "month must be in 1..12"),
    "azure_missing_column.csv": (1, "GeneratedTokens", "header has no such column"),
    "azure_negative_generated.csv": (2, "GeneratedTokens", "must be >= 0, got -5"),
    "azure_non_integer.csv": (3, "ContextTokens", "expected an integer, got '12.5'"),
    "azure_not_utf8.csv": (3, None, "not valid UTF-8"),
    "azure_unterminated_quote.csv": (3, None, "malformed CSV"),
    "azure_wrong_column_count.csv": (3, "GeneratedTokens", "the row has 2 of 3 columns"),
    "azure_zero_context.csv": (4, "ContextTokens", "must be >= 1, got 0"),
    "mooncake_bad_json.jsonl": (2, None, "invalid JSON"),
    "mooncake_empty.jsonl": (1, None, "no rows"),
    "mooncake_empty_hash_ids.jsonl": (1, "input_length", "greater than or equal to 1"),
    "mooncake_hash_count_mismatch.jsonl": (2, "hash_ids", "has 2 ids but input_length 1100"),
    "mooncake_missing_hash_ids.jsonl": (2, "hash_ids", "required field is missing"),
    "mooncake_negative_hash_id.jsonl": (1, "hash_ids[1]", "(got -2)"),
    "mooncake_negative_output.jsonl": (1, "output_length", "(got -3)"),
    "mooncake_negative_timestamp.jsonl": (1, "timestamp", "(got -5)"),
    "mooncake_not_object.jsonl": (2, None, "must be a JSON object, got int"),
    "mooncake_string_length.jsonl": (3, "input_length", "valid integer (got '600')"),
}


def _format(name: str) -> str:
    return "mooncake" if name.startswith("mooncake") else "azure"


def test_trace_corpus_is_complete() -> None:
    assert {p.name for p in HERE.iterdir()} == set(TRACE_CASES)


@pytest.mark.parametrize("name", sorted(TRACE_CASES))
def test_malformed_trace_rejected(name: str) -> None:
    line, field, text = TRACE_CASES[name]
    path = HERE / name
    with pytest.raises(WorkloadError) as caught:
        from_trace(_format(name), path)
    message = str(caught.value)
    prefix = f"{path}:{line}: " + ("" if field is None else f"field '{field}': ")
    assert "\n" not in message
    assert message.startswith(prefix), message
    assert text in message


@pytest.mark.parametrize("name", sorted(TRACE_CASES))
def test_malformed_trace_cli(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    code = main(
        ["workloads", "from-trace", "--format", _format(name), str(HERE / name), "-o", str(out)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vtwin: error: ")
    assert "Traceback" not in err
    assert TRACE_CASES[name][2] in err
    assert not out.exists()


def test_mooncake_sharing_from_hash_ids_equals_tokens_full_trace() -> None:
    """The whole bundled trace: hash-id sharing equals token sharing at block size 16."""
    workload = mooncake.replay(MOONCAKE_TRACE)
    rows = [row for _, row in mooncake.read_rows(MOONCAKE_TRACE)]
    rows.sort(key=lambda r: r.timestamp)
    from_ids = mooncake.sharing_from_hash_ids(rows, 16)
    from_tokens = prefix_sharing(workload.requests, 16)
    assert from_ids == from_tokens
    assert from_ids.total == sum(r.input_length // 16 for r in rows)
    assert 0.5 < from_ids.ratio < 0.8


@pytest.fixture(scope="module")
def mooncake_subset() -> tuple[Workload, list[mooncake.MooncakeRow]]:
    options = ReplayOptions(every=3, limit=120)
    rows = [row for _, row in mooncake.selected_rows(MOONCAKE_TRACE, options)]
    return mooncake.replay(MOONCAKE_TRACE, options), rows


@pytest.mark.parametrize("block_size", [8, 32, 64, 128, 512])
def test_mooncake_sharing_survives_block_sizes_dividing_512(
    block_size: int, mooncake_subset: tuple[Workload, list[mooncake.MooncakeRow]]
) -> None:
    workload, rows = mooncake_subset
    from_ids = mooncake.sharing_from_hash_ids(rows, block_size)
    assert from_ids == prefix_sharing(workload.requests, block_size)
    assert from_ids.seen > 0


def test_mooncake_equal_hash_ids_give_equal_tokens(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 9]},
        {"timestamp": 40, "input_length": 700, "output_length": 0, "hash_ids": [7, 8]},
        {"timestamp": 60, "input_length": 512, "output_length": 1, "hash_ids": [8]},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b, c = mooncake.replay(trace, ReplayOptions(step_ms=20)).requests
    assert a.prompt_token_ids[:700] == b.prompt_token_ids
    assert c.prompt_token_ids == a.prompt_token_ids[512:1024]
    assert (a.arrival_step, b.arrival_step, c.arrival_step) == (0, 2, 3)
    assert b.max_tokens == 1  # a recorded output of 0 still needs one token
    assert all(r.ignore_eos for r in (a, b, c))
    # Tokens are a function of the hash id alone, so another trace file gets the same ones.
    other = tmp_path / "u.jsonl"
    other.write_text(json.dumps(rows[2]) + "\n")
    assert mooncake.replay(other).requests[0].prompt_token_ids == c.prompt_token_ids


def test_time_model_and_selection() -> None:
    base = from_trace("azure", AZURE_TRACE, ReplayOptions(limit=40))
    fast = from_trace("azure", AZURE_TRACE, ReplayOptions(limit=40, scale=2.0))
    slow_steps = from_trace("azure", AZURE_TRACE, ReplayOptions(limit=40, step_ms=40.0))
    assert base.requests[0].arrival_step == 0
    for b, f, s in zip(base.requests, fast.requests, slow_steps.requests, strict=True):
        assert abs(f.arrival_step - b.arrival_step / 2) <= 1
        assert abs(s.arrival_step - b.arrival_step / 2) <= 1
    rows = list(azure.read_rows(AZURE_TRACE))[:40]
    first = rows[0].timestamp_ms
    for row, req in zip(rows, base.requests, strict=True):
        assert req.request_id == f"azure-{row.line:06d}"
        assert req.prompt_len == row.prompt_len
        assert req.max_tokens == max(1, row.output_len)
        assert req.arrival_step == int((row.timestamp_ms - first) // 20.0)
    every = from_trace("azure", AZURE_TRACE, ReplayOptions(every=5, limit=7))
    assert [r.request_id for r in every.requests] == [
        f"azure-{rows[0].line + 5 * i:06d}" for i in range(7)
    ]


def test_azure_prompts_are_unique_and_config_fits() -> None:
    workload = load("azure")
    assert len(workload.requests) == 200
    assert prefix_sharing(workload.requests, 16).seen == 0
    longest = max(r.prompt_len + r.max_tokens for r in workload.requests)
    assert workload.config.max_model_len >= longest
    assert workload.config.num_blocks - 1 >= workload.config.max_model_len // 16
    assert workload.step_ms == 20.0


def test_timestamp_formats() -> None:
    stamp = azure.parse_timestamp_ms
    assert stamp("2023-11-16 18:15:46.6805900") - stamp("2023-11-16 18:15:46") == pytest.approx(
        680.59
    )
    assert stamp("2024-05-10 00:00:00.5+00:00") == stamp("2024-05-10T00:00:00.500Z")
    assert stamp("2024-05-10 02:00:00+02:00") == stamp("2024-05-10 00:00:00")
    with pytest.raises(ValueError):
        stamp("2024/05/10 00:00:00")


def test_bad_replay_options_are_user_errors(tmp_path: Path) -> None:
    out = str(tmp_path / "o.jsonl")
    args = ["workloads", "from-trace", "--format", "azure", str(AZURE_TRACE), "-o", out]
    assert main([*args, "--limit", "0"]) == 2
    assert main([*args, "--scale", "-1"]) == 2
    assert main([*args, "--limit", "5", "--num-blocks", "3"]) == 2
    assert main(["workloads", "from-trace", "--format", "azure", "/no/such.csv", "-o", out]) == 2
