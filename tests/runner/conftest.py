"""Shared fixtures: one tiny Llama checkpoint per session (built with transformers) and its
Hugging Face reference. Heavy imports happen inside the fixtures, so collecting this directory
without torch still works (each test module importorskips what it needs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers", reason="building the tiny checkpoint needs transformers")
    from conformance.runner.checkpoint import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def hf_model(tiny_model_dir: Path) -> Any:
    from conformance.runner.hf_reference import HFReference

    return HFReference(tiny_model_dir)
