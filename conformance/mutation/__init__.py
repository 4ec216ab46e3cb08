"""Mutation testing of the twin (`nox -s mutation`): mutmut 3 mutates `impl/core` and
`impl/sched`, the differential suite kills the mutants, this package bounds the run and reports.

- `plugin`: pytest plugin active in mutation runs (Hypothesis profile `mutation`, fastest tests
  first, records the test that killed each mutant).
- `results`: reads mutmut's working directory (`mutants/`: meta files, killers, mutant sources)
  into one `Mutant` per mutant, with its status, file:line, unified diff and killer.
- `equivalents`: `conformance/equivalent_mutants.toml`, the mutants we accept as surviving, each
  with its reason; an entry that matches no mutant is stale and fails the run.
- `report`: the score, `mutation.json` and `index.html` of one run.
- `runs`: a directory per run under `reports/mutation/`, `latest` and the index of runs.
- `sync`: before each run, refreshes mutmut's copies of non-Python files (C sources, stubs)
  and removes copies whose source is gone, which mutmut itself never does.
- `store`: the verdicts kept in the repository (`verdicts.jsonl`), restored into `mutants/`
  before a run and written back after it, so a fresh clone does not start over.
- `run`: the CLI (`python -m conformance.mutation run --max-minutes 60`).

Why mutmut 3 and not our own mutator: it forks one worker per mutant from a process that has
already imported vllm and collected the tests, so the oracle's ~6 s import is paid once per run,
and it keeps per-function hashes so a rerun only tests mutants of changed functions.
"""
