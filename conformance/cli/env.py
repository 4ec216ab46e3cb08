"""``vtwin env``: the managed environments that run other vLLM releases.

``vtwin env create SPEC`` builds a release's environment once (`conformance.systems.remote.envs`:
a release the package index does not have is refused before anything is installed, and a
build that fails leaves nothing behind); ``vtwin env list`` shows them; ``vtwin env remove
SPEC`` deletes one.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    env = subparsers.add_parser("env", help="managed environments for other vLLM releases",
                                description="Build, list or remove the virtualenvs that run "
                                            "other vLLM releases (specs vllm==X.Y.Z, "
                                            "vllm@PATH).")
    actions = env.add_subparsers(dest="env_command", metavar="ACTION")
    create = actions.add_parser("create", help="build the environment of a spec (once)")
    create.add_argument("spec", metavar="SPEC", help="vllm==X.Y.Z or vllm@PATH")
    create.add_argument("--force", action="store_true", help="rebuild even if built")
    create.add_argument("--verbose", action="store_true", help="show pip's own output")
    create.set_defaults(handler=_create)
    listing = actions.add_parser("list", help="the environments built (spec, path, vLLM, size)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_list)
    remove = actions.add_parser("remove", help="delete the environment of a spec")
    remove.add_argument("spec", metavar="SPEC", help="vllm==X.Y.Z or vllm@PATH")
    remove.set_defaults(handler=_remove)
    env.set_defaults(handler=lambda _args: _help(env))


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _create(args: argparse.Namespace) -> int:
    from conformance.systems.remote.envs import create

    create(args.spec, sys.stderr, force=args.force, verbose=args.verbose)
    return 0


def _list(args: argparse.Namespace) -> int:
    from conformance.systems.remote.envs import cache_root, list_envs

    rows = list_envs()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"no environments under {cache_root() / 'envs'} (vtwin env create vllm==X.Y.Z)")
    for row in rows:
        print(f"{row['spec']:<24} vllm {row['vllm'] or '-':<10} {row['size_mb']:>6} MB  "
              f"{row['status']:<10} {row['path']}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from conformance.systems.remote.envs import remove

    path = remove(args.spec)
    print(f"vtwin env: removed {path}", file=sys.stderr)
    return 0
