"""Generation guided by coverage: vary what reached something new (issue 33 §1).

Uniform draws saturate: after a few hundred workloads, more of them execute no new line of the
twin or of upstream, and the states that hide realistic bugs (a hole evicted inside a cached
run, a prompt one token past a window's boundary, a third group shortening a hybrid hit) stay
rare. `vtwin guide` keeps a corpus of workloads that executed a new branch arc on either side
and varies them, AFL-style, with operators that aim at those states; the same budget spent on
uniform draws is the baseline its report compares against.

| module | what it does |
| --- | --- |
| `features` | a run's features: twin and upstream arcs (coverage.py), activity buckets |
| `state` | state features arcs cannot see: holes inside cached runs, hybrid searches asked again |
| `mutate` | workload mutation operators and `havoc`, kept valid by the format's own checks |
| `search` | one strategy's loop: fresh draws, corpus, mutants, timeline, failures |
| `runner` | the pair in lockstep under the probe, judged as the campaign judges |
| `one` | one strategy in its own process, written to a directory |
| `run` | every strategy, one process each (a planted bug applied in a scratch copy), report |
| `report` | `summary.json` and `index.html`: strategies side by side |
"""
