"""``vtwin kv plan``: the KV-cache plan of a model description, explained, optionally checked.

``vtwin kv plan --model NAME|FILE --memory 8GiB [--block-size 16] [--json] [--check]`` plans
with the twin (`impl.plan`) and prints one line per group (why these layers, why this page
size) and the pool; ``--json`` prints the plan in its comparison form instead. ``--check`` also
plans with upstream vLLM's planner (`conformance.plan.upstream`) and exits 1 naming every
difference. A configuration the planner refuses (too little memory, a layout that cannot hold
the pages) is one error line, exit 2; with ``--check`` it says whether upstream refuses too.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from impl.plan import KVCachePlan, PlanError, PlanOptions, plan_kv_cache
from impl.plan.explain import explain
from impl.plan.options import LAYOUTS
from impl.plan.render import plan_to_dict
from vtwin.errors import UserError
from workloads.models import ModelFile, list_models, load_model

_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def parse_memory(text: str) -> int:
    """'8GiB', '1.5 GiB', '512MiB', '4000000000' -> bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2) not in _UNITS:
        raise UserError(f"--memory: expected a size such as 8GiB, 512MiB or a byte count "
                        f"(got {text!r})")
    value = int(float(match.group(1)) * _UNITS[match.group(2)])
    if value < 1:
        raise UserError(f"--memory: must be at least one byte (got {text!r})")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kv = subparsers.add_parser("kv", help="KV-cache planning from a model's layers",
                               description="KV-cache tools.")
    commands = kv.add_subparsers(dest="kv_command", metavar="COMMAND")
    plan = commands.add_parser(
        "plan", help="plan a model's KV-cache groups, block sizes and pool",
        description="Group a model's layers into KV-cache groups, pick block and page sizes "
                    "and size the pool from a memory budget, as vLLM 0.32.0 does.")
    plan.add_argument("--model", required=True, metavar="NAME|FILE",
                      help=f"a model description file or bundled name ({', '.join(list_models())})")
    plan.add_argument("--memory", required=True, metavar="SIZE",
                      help="KV-cache memory budget, e.g. 8GiB")
    plan.add_argument("--block-size", type=int, default=None, help="requested block size (16)")
    plan.add_argument("--max-model-len", type=int, default=None,
                      help="longest request (default: the description's, else 2048)")
    plan.add_argument("--max-num-batched-tokens", type=int, default=2048,
                      help="token budget per step (2048): tokens in flight for windows")
    plan.add_argument("--async-scheduling", action="store_true",
                      help="two steps in flight (window and chunk groups reserve for both)")
    plan.add_argument("--kernel-block-size", type=int, default=16,
                      help="the attention backend's kernel block: multiples of it (16)")
    plan.add_argument("--layout", default="LBHNC", choices=tuple(LAYOUTS),
                      help="physical KV-cache layout (LBHNC)")
    plan.add_argument("--no-prefix-caching", action="store_true",
                      help="prefix caching off (mamba keeps one state per request)")
    plan.add_argument("--disable-hybrid-kv-cache-manager", action="store_true",
                      help="allocate local layers as full attention")
    plan.add_argument("--num-gpu-blocks-override", type=int, default=None, metavar="N",
                      help="use N blocks whatever the memory")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--check", action="store_true",
                      help="also plan with upstream vLLM and exit 1 on any difference")
    plan.set_defaults(handler=_plan)

    def usage(args: argparse.Namespace) -> int:
        kv.print_help()
        return 2

    kv.set_defaults(handler=usage)


def options_from(args: argparse.Namespace, model: ModelFile) -> PlanOptions:
    try:
        return PlanOptions(
            block_size=args.block_size, kernel_block_size=args.kernel_block_size,
            max_model_len=args.max_model_len or model.max_model_len or 2048,
            max_num_batched_tokens=args.max_num_batched_tokens,
            async_scheduling=args.async_scheduling,
            enable_prefix_caching=not args.no_prefix_caching,
            num_gpu_blocks_override=args.num_gpu_blocks_override,
            disable_hybrid_kv_cache_manager=args.disable_hybrid_kv_cache_manager,
            kv_cache_layout=args.layout)
    except ValueError as err:
        raise UserError(f"--{str(err).split(':')[0].replace('_', '-')}: "
                        f"{str(err).partition(': ')[2]}") from None


def _plan(args: argparse.Namespace) -> int:
    memory = parse_memory(args.memory)
    model = load_model(args.model)
    options = options_from(args, model)
    plan: KVCachePlan | None = None
    refusal: PlanError | None = None
    try:
        plan = plan_kv_cache(model.spec, memory, options)
    except PlanError as err:
        refusal = err
    differences: list[str] | None = None
    if args.check:
        differences = _check(model, memory, options)
    if refusal is not None:
        agreed = "" if differences is None else (
            " (upstream refuses too)" if not differences else f" ({differences[0]})")
        if differences:
            print(f"DIFFERENT from upstream: {differences[0]}")
            return 1
        raise UserError(f"{model.spec.name}: {refusal}{agreed}")
    assert plan is not None
    if args.json:
        out: dict[str, Any] = {"model": model.spec.name, "memory": memory,
                               "options": _options_dict(options), "plan": plan_to_dict(plan)}
        if differences is not None:
            out["check"] = {"equal": not differences, "differences": differences}
        print(json.dumps(out, indent=1))
    else:
        print("\n".join(explain(plan)))
        if differences is not None:
            print("check: equal to upstream vLLM's plan" if not differences else
                  "check: DIFFERENT from upstream vLLM's plan:\n  " + "\n  ".join(differences))
    return 1 if differences else 0


def _check(model: ModelFile, memory: int, options: PlanOptions) -> list[str]:
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise UserError("--check needs upstream vLLM (pip install -e '.[oracle]')") from None
    from conformance.plan.compare import compare

    return compare(model.spec, memory, options)[1]


def _options_dict(options: PlanOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in PlanOptions.__dataclass_fields__}
