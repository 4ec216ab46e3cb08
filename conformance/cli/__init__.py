"""The `vtwin` command line: argparse and printing only, one module per subcommand.

`app` assembles the parser from the subcommand modules (each has a ``register(subparsers)``
that adds its parser and sets ``handler``); the work itself lives in the library packages
(`conformance.sched`, `conformance.drift`, `conformance.systems`, ...), never here.
"""

from conformance.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
