"""`vtwin kv plan`: the README's commands, exact output where it is short, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.cli.plan import parse_memory
from conformance.plan import compare as plan_compare


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["kv", "plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_human_plan_explains_each_group(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "gpt-oss-20b", "--memory", "8GiB")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "gpt-oss-20b: 24 layers -> 2 KV-cache groups"
    assert lines[1] == (
        "  group 0: sliding_window(128), 12 layers (layers 0, 2, 4, 6, 8, 10, ...), block 16: "
        "all 12 sliding_window(128) layers; groups hold up to 12 layers (the smallest type has "
        "12); page 32 KiB = 16 tokens x 2 KiB per token; 137 blocks per max-length request")
    # 24 layers x 32 KiB pages split into 2 groups of 12: 384 KiB a block.
    assert lines[3] == ("  pool: 21845 blocks x 384 KiB = 8.00 GiB of 8 GiB (layout LBHNC, "
                        "2 tensors); one request of 131072 tokens holds 8329 blocks")


def test_json_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "jamba-v0.1", "--memory", "24GiB", "--json")
    data = json.loads(out)
    assert code == 0 and data["options"]["max_model_len"] == 262144
    plan = data["plan"]
    assert plan["num_blocks"] == 24 * (1 << 30) // (4 * 80 * 4096)
    assert [g["spec"]["type"] for g in plan["groups"]] == ["mamba"] * 7 + ["full"]
    assert {g["spec"]["block_size"] for g in plan["groups"]} == {80}


def test_refusals_and_bad_files_are_one_line(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    code, out, err = run(capsys, "--model", "llama-3-8b", "--memory", "512MiB")
    assert code == 2 and out == "" and err == (
        "vtwin: error: llama-3-8b: memory: one request of max_model_len 8192 needs 1073741824 "
        "bytes (1 GiB) of KV cache, more than the 534773760 bytes (510 MiB) left besides "
        "the null block; the longest that fits is 4080\n")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "vtwin-model", "name": "bad", "layers": [
        {"type": "chunked_local", "num_kv_heads": 8, "head_size": 128}]}))
    code, _, err = run(capsys, "--model", str(bad), "--memory", "1GiB")
    assert code == 2 and err == (f"vtwin: error: {bad}: field 'layers[0].attention_chunk_size': "
                                 "needed for a 'chunked_local' layer\n")
    code, _, err = run(capsys, "--model", "llama-3-8b", "--memory", "8 apples")
    assert code == 2 and "--memory: expected a size such as 8GiB" in err


def test_parse_memory() -> None:
    assert parse_memory("8GiB") == 8 << 30
    assert parse_memory("1.5 GiB") == 3 << 29
    assert parse_memory("512MiB") == 512 << 20
    assert parse_memory("4000") == 4000


def test_check_exits_1_naming_the_difference(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted upstream that plans one block fewer: `--check` names the field, exit 1."""
    pytest.importorskip("vllm", reason="--check needs upstream vLLM")

    def one_block_fewer(*args: object) -> plan_compare.Outcome:
        ours = plan_compare.twin_outcome(*args)  # type: ignore[arg-type]
        assert ours.plan is not None
        return plan_compare.Outcome(plan={**ours.plan, "num_blocks": ours.plan["num_blocks"] - 1})

    monkeypatch.setattr(plan_compare, "upstream_outcome", one_block_fewer)
    code, out, _ = run(capsys, "--model", "llama-3-8b", "--memory", "8GiB", "--check")
    assert code == 1 and out.splitlines()[-1] == "  num_blocks: twin 4096, upstream 4095"


@pytest.mark.oracle
def test_check_against_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("vllm", reason="--check needs upstream vLLM")
    code, out, _ = run(capsys, "--model", "bamba-9b", "--memory", "8GiB", "--check")
    assert code == 0 and out.splitlines()[-1] == "check: equal to upstream vLLM's plan"
    code, out, err = run(capsys, "--model", "bamba-9b", "--memory", "1MiB", "--check")
    assert code == 2 and "(upstream refuses too)" in err


def test_a_negative_size_reaches_the_size_check(capsys: pytest.CaptureFixture[str]) -> None:
    """`--memory -24GiB` once got argparse's "expected one argument"."""
    code, _, err = run(capsys, "--model", "llama-3-8b", "--memory", "-24GiB")
    assert code == 2
    assert err.strip() == ("vtwin: error: --memory: expected a size such as 8GiB, 512MiB or a "
                           "byte count (got '-24GiB')")
