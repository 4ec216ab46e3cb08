"""Pytest plugin: how many Hypothesis examples each test ran, as junit properties.

"200 examples per KV family" is a profile setting, not a measurement: a test can stop early
(the space exhausted, a health check, a failure) or draw mostly invalid data. The report index
(`conformance.ci.report`) shows what really ran, per area, from two properties this plugin adds to
every Hypothesis test's junit record: `hypothesis_examples` (test cases that ran to a verdict,
passing or failing, in the reuse, generate and target phases; shrinking re-runs found examples
and is not counted) and `hypothesis_invalid` (test cases rejected by `assume` or filters).

The counts come from Hypothesis' own statistics callback (`hypothesis.statistics.collector`,
the one its `--hypothesis-show-statistics` uses; it runs once per test whether or not that
option is given, so counting costs nothing measurable). Unlike the statistics text Hypothesis
writes into junit, `user_properties` survive pytest-xdist, which CI uses. Loaded by
`conformance/tests/conftest.py`; elsewhere `pytest -p conformance.ci.hypothesis_counts`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

EXAMPLES = "hypothesis_examples"
INVALID = "hypothesis_invalid"
COUNTED_PHASES = ("reuse", "generate", "target")


@dataclass(frozen=True, slots=True)
class Counts:
    examples: int
    invalid: int


def counts_of(stats: Mapping[str, Any]) -> Counts:
    """Examples (valid or failing) and invalid test cases in one run's statistics dict."""
    examples = invalid = 0
    for phase in COUNTED_PHASES:
        for case in stats.get(f"{phase}-phase", {}).get("test-cases", ()):
            status = case.get("status")
            if status in ("valid", "interesting"):
                examples += 1
            elif status in ("invalid", "overrun"):
                invalid += 1
    return Counts(examples, invalid)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Innermost wrapper (`trylast`), so the callback installed here is the one Hypothesis
    sees; it passes the statistics on to Hypothesis' own plugin's callback."""
    try:
        from hypothesis.statistics import collector
    except ImportError:
        yield
        return
    variable: Any = collector  # typed DynamicVariable[None] by Hypothesis (its default)
    seen: list[Counts] = []
    outer: Callable[[Any], None] | None = variable.value

    def note(stats: Any) -> None:
        seen.append(counts_of(stats))
        if outer is not None:
            outer(stats)

    with variable.with_value(note):
        yield
    if seen:  # a test may run several @given functions: add them up
        item.user_properties.append((EXAMPLES, sum(c.examples for c in seen)))
        item.user_properties.append((INVALID, sum(c.invalid for c in seen)))
