"""Bundled workloads by name, and `load`, which takes a name or a file path.

Bundled workloads are made on demand rather than stored: every generator family at seed 0 and
scale 1, plus replays of the two bundled traces. The plain `mooncake` and `azure` replays are
cut down to fit CI (the first 100 or 200 rows, replayed faster so they span a few hundred steps);
`mooncake-full`, `mooncake-conversation` and `azure-full` replay the whole traces for
benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from vtwin.errors import UserError
from workloads.generators import FAMILIES, generate
from workloads.loader import load_file
from workloads.model import Workload
from workloads.traces import azure, mooncake
from workloads.traces.replay import ReplayOptions

TRACES_DIR = Path(__file__).resolve().parent / "data" / "traces"
MOONCAKE_TRACE = TRACES_DIR / "mooncake_synthetic_trace.jsonl"
MOONCAKE_CONVERSATION_TRACE = TRACES_DIR / "mooncake_conversation_trace.jsonl"
AZURE_TRACE = TRACES_DIR / "azure_llm_2023_conv.csv"


@dataclass(frozen=True, slots=True)
class Bundled:
    name: str
    summary: str
    make: Callable[[], Workload]


def _family(name: str) -> Callable[[], Workload]:
    return lambda: generate(name, 0, 1.0)


def _replay(
    replay: Callable[[str | Path, ReplayOptions | None], Workload],
    path: Path,
    options: ReplayOptions,
) -> Callable[[], Workload]:
    return lambda: replay(path, options)


BUNDLED: MappingProxyType[str, Bundled] = MappingProxyType(
    {
        **{
            f.name: Bundled(f.name, f"generated (seed 0, scale 1): {f.summary}", _family(f.name))
            for f in FAMILIES.values()
        },
        "mooncake": Bundled(
            "mooncake",
            "Mooncake synthetic trace, first 100 rows at 4x rate (CI-sized)",
            _replay(
                mooncake.replay,
                MOONCAKE_TRACE,
                ReplayOptions(limit=100, scale=4.0, name="mooncake"),
            ),
        ),
        "mooncake-full": Bundled(
            "mooncake-full",
            "Mooncake synthetic trace, all 3993 rows as recorded (benchmark-sized)",
            _replay(mooncake.replay, MOONCAKE_TRACE, ReplayOptions(name="mooncake-full")),
        ),
        "mooncake-conversation": Bundled(
            "mooncake-conversation",
            "Mooncake conversation trace, all 12031 rows as recorded (benchmark-sized)",
            _replay(mooncake.replay, MOONCAKE_CONVERSATION_TRACE,
                    ReplayOptions(name="mooncake-conversation")),
        ),
        "azure": Bundled(
            "azure",
            "Azure LLM 2023 conversation trace, first 200 rows at 8x rate (CI-sized)",
            _replay(azure.replay, AZURE_TRACE, ReplayOptions(limit=200, scale=8.0, name="azure")),
        ),
        "azure-full": Bundled(
            "azure-full",
            "Azure LLM 2023 conversation trace, all 19366 rows as recorded (benchmark-sized)",
            _replay(azure.replay, AZURE_TRACE, ReplayOptions(name="azure-full")),
        ),
    }
)


def list_workloads() -> tuple[str, ...]:
    """Names `load` accepts besides file paths."""
    return tuple(BUNDLED)


def load(name_or_path: str | Path) -> Workload:
    """A bundled workload by name, or the workload file at a path.

    A `Path` is always a file. A string is a file if one exists there, else a bundled name.
    """
    if isinstance(name_or_path, Path):
        return load_file(name_or_path)
    if Path(name_or_path).is_file():
        return load_file(name_or_path)
    bundled = BUNDLED.get(name_or_path)
    if bundled is not None:
        return bundled.make()
    known = ", ".join(BUNDLED)
    raise UserError(
        f"no workload file or bundled workload named {name_or_path!r} (bundled: {known})"
    )
