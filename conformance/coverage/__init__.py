"""Upstream coverage, measured by the project: how much of upstream vLLM's scheduler, KV-cache,
offload and connector code the gate and the generated families execute.

`nox -s coverage` (`python -m conformance.coverage`) runs them under coverage.py over upstream's
package *directories* (module names would make coverage import vllm a second time, which
segfaults), then writes `reports/coverage/RUN_ID/`: coverage.py's own `coverage.json` and HTML
(upstream's source with hit and missed lines), `summary.json` and `index.html` (per file
statements, branches, hit %; the missed lines grouped by the feature they belong to, from
`conformance/coverage_features.toml`; what no entry names is listed as unmapped, so a new
release's new code shows by itself). `--check` holds the focus files to the committed baseline
(`conformance/coverage_baseline.json`): a drop fails, naming the regions no longer reached.

| module | what it does |
| --- | --- |
| `targets` | which upstream directories are measured, and the focus files of the ratchet |
| `features` | the feature map: missed lines -> (file, function) -> feature, or unmapped |
| `summary` | coverage.json -> per-file numbers, feature groups, the page |
| `baseline` | the ratchet: compare with the committed baseline, or write a new one |
| `__main__` | run the measured commands, combine, report, check |
"""
