"""Where things are: the checkout's root and the harness's data files, named once.

Modules ask here instead of counting `Path(__file__).parents[N]`, which silently points
elsewhere the day a module moves one folder down."""

from __future__ import annotations

from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent
"""`conformance/`: the harness package."""
REPO_ROOT = HARNESS_DIR.parent
"""The checkout (or, installed, the site directory holding the packages)."""
DIVERGENCES_TOML = HARNESS_DIR / "divergences.toml"
"""Known divergences from upstream, each with its reason (`conformance.sched.divergences`)."""
EQUIVALENT_MUTANTS_TOML = HARNESS_DIR / "equivalent_mutants.toml"
"""Mutants accepted as equivalent, each with its reason (`conformance.mutation`)."""
REGRESSIONS_DIR = HARNESS_DIR / "regressions"
"""Regression workloads the gate replays (`conformance.sched.suite`)."""
DRIFT_PROBES_DIR = REPO_ROOT / "workloads" / "data" / "drift"
"""The workloads `vtwin drift` adds to the suite to show release differences."""
HYPOTHESIS_REGRESSIONS_DIR = REPO_ROOT / ".hypothesis" / "regressions"
"""Where the mutant hunt keeps the workloads it found."""
SEMANTIC_MUTANTS_DIR = HARNESS_DIR / "mutation" / "semantic"
"""Hand-planted semantic bugs, one patch each (`conformance.mutation.planted`)."""
