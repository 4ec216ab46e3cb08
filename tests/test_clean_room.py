"""The twin never imports vllm (clean room): statically and at run time."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import impl

IMPL_DIR = Path(impl.__file__).parent


def test_no_source_file_under_impl_imports_vllm() -> None:
    offenders = []
    for path in IMPL_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name == "vllm" or name.startswith("vllm.") for name in names):
                offenders.append(f"{path}:{node.lineno}")
    assert not offenders, f"impl/ imports vllm at: {offenders}"


def test_importing_every_impl_module_loads_no_vllm() -> None:
    modules = [m.name for m in pkgutil.walk_packages([str(IMPL_DIR)], prefix="impl.")]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "assert not any(k == 'vllm' or k.startswith('vllm.') for k in sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert importlib.import_module("impl.core.kv_cache_manager")
