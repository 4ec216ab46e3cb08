"""`vtwin generate`: token ids on stdout (plain or JSON); bad input is one line, exit code 2."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the model runner needs torch")

from conformance.cli import generate as runner_cli
from vtwin.errors import UserError  # noqa: E402


def _run(*argv: str) -> int:
    """Parse with the subcommand's own parser and run its handler (what `vtwin` does)."""
    parser = argparse.ArgumentParser(prog="vtwin")
    runner_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    code: int = args.handler(args)
    return code


def test_json_output_matches_hf_greedy(tiny_model_dir: Path, hf_model: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("--model", str(tiny_model_dir), "--prompt-ids", "1,2,3", "--max-tokens", "6",
                "--ignore-eos", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"token_ids": hf_model.greedy([1, 2, 3], 6)}


def test_plain_output(tiny_model_dir: Path, hf_model: Any,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("--model", str(tiny_model_dir), "--prompt-ids", "5, 6", "--max-tokens", "3",
                "--ignore-eos") == 0
    assert capsys.readouterr().out.strip() == ",".join(map(str, hf_model.greedy([5, 6], 3)))


def _error(*argv: str) -> str:
    with pytest.raises(UserError) as info:
        _run(*argv)
    message = str(info.value)
    assert message and "\n" not in message
    return message


def test_bad_prompt_ids(tiny_model_dir: Path) -> None:
    assert "'x' is not an integer" in _error("--model", str(tiny_model_dir), "--prompt-ids",
                                             "1,x")
    assert "expected comma-separated integers" in _error("--model", str(tiny_model_dir),
                                                         "--prompt-ids", "1,,2")
    assert "outside the vocabulary" in _error("--model", str(tiny_model_dir), "--prompt-ids",
                                              "1,99999")


def test_bad_directories(tiny_model_dir: Path, tmp_path: Path) -> None:
    assert "config.json: missing" in _error("--model", str(tmp_path), "--prompt-ids", "1")
    model = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model)
    (model / "model.safetensors").unlink()
    assert "no *.safetensors weight file" in _error("--model", str(model), "--prompt-ids", "1")
    raw = json.loads((tiny_model_dir / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(dict(raw, architectures=["GPT2LMHeadModel"])))
    assert "unsupported architecture" in _error("--model", str(model), "--prompt-ids", "1")
    shutil.copy(tiny_model_dir / "model.safetensors", model)
    (model / "config.json").write_text(json.dumps(dict(raw, intermediate_size=100)))
    assert "mlp.gate_proj.weight has shape [256, 128]" in _error(
        "--model", str(model), "--prompt-ids", "1")


def test_through_the_vtwin_entry_point(tiny_model_dir: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`vtwin generate` is registered, prints the one-line error and exits 2."""
    from conformance.cli import app as cli

    assert "conformance.cli.generate" in cli.SUBCOMMAND_MODULES
    assert cli.main(["generate", "--model", str(tiny_model_dir / "nope"),
                     "--prompt-ids", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vtwin: error: ") and "not a directory" in err
    assert len(err.splitlines()) == 1
