"""The small CLI faults a new user hit, each pinned: `--version`, `-` as stdout, directories
passed as workloads, `workloads validate` reporting every bad file, gate names in
`workloads show`, `--integrity-every 0`, and argument errors raised before any work starts.
Runs the twin against itself: no upstream vLLM needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance import cli
from conformance.cli import conform as sched_cli
from conformance.cli.conform import main
from vtwin.errors import UserError
from workloads import dump, load

IMPL = ["--system", "impl", "--against", "impl"]


def test_version_names_vtwin_and_the_oracle(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("vtwin 0.") and "upstream oracle:" in out


def test_json_dash_writes_to_stdout_not_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["conform", "--workload", "decode-heavy", *IMPL, "--report", "out",
                 "--json", "-"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert not (tmp_path / "-").exists()
    assert json.loads(captured.out)["workloads"][0]["workload"] == "decode-heavy"


def test_a_directory_as_workload_says_so(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    dump(load("decode-heavy"), tmp_path / "a.jsonl")
    code = main(["conform", "--workload", str(tmp_path), *IMPL, "--report", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "is a directory, not a workload file" in err and "a.jsonl" in err
    assert cli.main(["workloads", "validate", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_validate_reports_every_bad_file(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.jsonl"
    dump(load("decode-heavy"), good)
    bad1, bad2 = tmp_path / "bad1.jsonl", tmp_path / "bad2.jsonl"
    bad1.write_text("{not json\n")
    bad2.write_text("[]\n")
    code = cli.main(["workloads", "validate", str(bad1), str(good), str(bad2)])
    captured = capsys.readouterr()
    assert code == 2
    assert f"ok: {good}" in captured.out
    assert str(bad1) in captured.err and str(bad2) in captured.err
    assert "2 of 3 workload files are bad" in captured.err


def test_workloads_show_knows_gate_suite_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["workloads", "show", "hybrid-mamba", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "hybrid-mamba"


def test_integrity_every_zero_is_accepted_and_negative_says_non_negative(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conform", "--workload", "decode-heavy", *IMPL, "--report", str(tmp_path),
                 "--integrity-every", "0"]) == 0
    capsys.readouterr()
    code = main(["conform", "--workload", "decode-heavy", *IMPL, "--report", str(tmp_path),
                 "--integrity-every", "-1"])
    err = capsys.readouterr().err
    assert code == 2 and "must be a non-negative integer (0: never), got -1" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--report", "{file}"], "not a directory"),
    (["--json", "{dir}"], "is a directory; give a file name or '-'"),
    (["--run-id", "../up"], "--run-id: letters, digits"),
    (["--run-id", "x", "--report", "{dir}"], "does not combine with --report"),
])
def test_argument_errors_come_before_any_work(
        args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    monkeypatch.chdir(tmp_path)

    def must_not_run(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a workload ran before the arguments were checked")

    monkeypatch.setattr(sched_cli, "run_conform", must_not_run)
    filled = [a.format(file=a_file, dir=tmp_path) for a in args]
    code = main(["conform", "--workload", "decode-heavy", *IMPL, *filled])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_every_pytest_warning_filter_says_why() -> None:
    """Filters hide only upstream's noise, each under a comment giving the reason."""
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    block = text.split("filterwarnings = [", 1)[1].split("]\n", 1)[0]
    lines = [line.strip() for line in block.strip().splitlines()]
    filters = [i for i, line in enumerate(lines) if line.startswith('"')]
    assert filters, "no filterwarnings"
    for i in filters:
        assert lines[i].startswith('"ignore:') and lines[i - 1].startswith("#"), lines[i]


@pytest.mark.parametrize("argv", [["workloads", "list"], ["workloads", "show", "prefix-sharing"]])
def test_a_reader_that_leaves_early_gets_no_traceback(argv: list[str]) -> None:
    """`vtwin workloads list | head -1`: the pipe closes under vtwin; it stops quietly. The
    reader here (`true`) leaves before vtwin has even started, so every write meets a closed
    pipe, deterministically."""
    import subprocess
    import sys

    shell = f"{sys.executable} -m conformance.cli {' '.join(argv)} | true; exit ${{PIPESTATUS[0]}}"
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=False,
                          timeout=120)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 141)


def test_a_rejected_conform_leaves_no_run_directory_and_a_short_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A workload file that was found and read but is malformed: one line about its content
    (no list of suite entries, which answers a question nobody asked), and no empty run
    directory left under reports/conformance/."""
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"bad": 1}\n', encoding="utf-8")
    assert main(["conform", "--workload", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vtwin: error: {bad}:1:") and "suite entries" not in err
    runs = tmp_path / "reports" / "conformance"
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())


def test_an_output_file_in_a_missing_directory_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--json /nonexistent/dir/out.json` once exited 0 and created the directories at the
    filesystem root; it is one line now, and nothing is created."""
    target = tmp_path / "missing" / "dir" / "out.json"
    assert main(["conform", "--workload", "decode-heavy", "--json", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"vtwin: error: --json {target}: directory {target.parent} does not exist; "
                   "create it first, or give '-' for stdout")
    assert not (tmp_path / "missing").exists()


def test_env_remove_deletes_an_environment_and_says_which(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VTWIN_CACHE_DIR", str(tmp_path))
    built = tmp_path / "envs" / "vllm-9.8.7"
    (built / "bin").mkdir(parents=True)
    assert cli.main(["env", "remove", "vllm==9.8.7"]) == 0
    assert not built.exists()
    assert capsys.readouterr().err.strip() == f"vtwin env: removed {built}"
    assert cli.main(["env", "remove", "vllm==9.8.7"]) == 2
    assert "no environment for vllm==9.8.7" in capsys.readouterr().err


def test_env_create_of_a_release_the_index_lacks_installs_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`vtwin env create vllm==9.9.9` once installed torch for 25 s, printed pip's whole
    version list and left an 839 MB environment; now it asks the index first."""
    import subprocess as sp

    monkeypatch.setenv("VTWIN_CACHE_DIR", str(tmp_path))
    calls: list[list[str]] = []

    def index(argv: list[str], **kwargs: object) -> sp.CompletedProcess[str]:
        calls.append(argv)
        assert argv[1:4] == ["-m", "pip", "index"], argv  # nothing but the index is asked
        return sp.CompletedProcess(argv, 0, "vllm (0.33.0)\nAvailable versions: 0.33.0, "
                                            "0.32.0, 0.31.0\n", "")

    monkeypatch.setattr("conformance.systems.remote.envs.subprocess.run", index)
    assert cli.main(["env", "create", "vllm==9.9.9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("vtwin: error: vllm==9.9.9: the package index has no such release (newest "
                   "vllm releases: 0.33.0, 0.32.0, 0.31.0)")
    assert len(calls) == 1 and not (tmp_path / "envs" / "vllm-9.9.9").exists()


def test_a_failed_environment_build_leaves_nothing_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess as sp

    from conformance.systems.remote import envs

    monkeypatch.setenv("VTWIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(envs, "check_release_exists", lambda requirement: None)

    def failing(argv: list[str], **kwargs: object) -> sp.CompletedProcess[str]:
        (tmp_path / "envs" / "vllm-9.9.9" / "lib").mkdir(parents=True, exist_ok=True)
        return sp.CompletedProcess(argv, 1, "ERROR: " + "x" * 2000 + "\n", "")

    monkeypatch.setattr("conformance.systems.remote.envs.subprocess.run", failing)
    with pytest.raises(UserError) as raised:
        envs.create("vllm==9.9.9", __import__("io").StringIO())
    assert len(str(raised.value)) < 400 and "stage 'venv' failed" in str(raised.value)
    assert not (tmp_path / "envs" / "vllm-9.9.9").exists()
