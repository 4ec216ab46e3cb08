"""Shared fixtures: one tiny Llama and one tiny Llama 4 (text) checkpoint per session (built
with transformers) and their Hugging Face references. Heavy imports happen inside the
fixtures, so collecting this directory without torch still works (each test module
importorskips what it needs)."""

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


@pytest.fixture(scope="session")
def tiny_llama4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dense Llama 4 text model: chunked local attention (16-token chunks) on 6 of 8 layers."""
    pytest.importorskip("transformers", reason="building the tiny checkpoint needs transformers")
    from conformance.runner.checkpoint import build_tiny_llama4

    return build_tiny_llama4(tmp_path_factory.mktemp("tiny-llama4"))


@pytest.fixture(scope="session")
def hf_llama4(tiny_llama4_dir: Path) -> Any:
    from conformance.runner.hf_reference import HFReference

    return HFReference(tiny_llama4_dir)
