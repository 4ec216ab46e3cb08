"""``vtwin generate``: run the engine twin on a checkpoint directory and print the token ids.

torch and the model code are imported only when the command runs, so registering the
subcommand costs nothing for the other `vtwin` commands. Bad input (a missing file, a checkpoint
whose shapes contradict its config, an unsupported architecture, malformed prompt ids) surfaces
as `UserError`: one line, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from vtwin.errors import UserError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "generate", help="generate token ids with the engine twin",
        description="Greedy (or sampled) generation from token-id prompts on a Hugging Face "
        "Llama checkpoint directory (config.json + *.safetensors).")
    parser.add_argument("--model", required=True, metavar="DIR", help="checkpoint directory")
    parser.add_argument("--prompt-ids", required=True, metavar="IDS",
                        help="comma-separated prompt token ids, e.g. 1,2,3")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens to generate (16)")
    parser.add_argument("--ignore-eos", action="store_true", help="do not stop at EOS")
    parser.add_argument("--json", action="store_true", help='print {"token_ids": [...]}')
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    parser.add_argument("--top-k", type=int, default=0, help="0 disables (default)")
    parser.add_argument("--top-p", type=float, default=1.0, help="1.0 disables (default)")
    parser.add_argument("--seed", type=int, default=None, help="per-request sampling seed")
    parser.add_argument("--block-size", type=int, default=16, help="KV block size (16)")
    parser.add_argument("--attention-backend", default="auto",
                        choices=("auto", "torch", "triton", "cpu", "native"),
                        help="auto: Triton on CUDA; on CPU the native C kernels where a "
                             "compiler is here, else the batched torch kernel")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: auto)")
    parser.set_defaults(handler=_generate)


def parse_prompt_ids(text: str) -> list[int]:
    parts = [part.strip() for part in text.split(",")]
    if not parts or not all(parts):
        raise UserError(f"--prompt-ids: expected comma-separated integers (got {text!r})")
    try:
        return [int(part) for part in parts]
    except ValueError:
        bad = next(p for p in parts if not p.lstrip("-").isdigit())
        raise UserError(f"--prompt-ids: {bad!r} is not an integer") from None


def _generate(args: argparse.Namespace) -> int:
    prompt = parse_prompt_ids(args.prompt_ids)
    try:
        token_ids = _run(args, prompt)
    except ModuleNotFoundError as err:
        raise UserError(f"generate needs the {err.name} package installed") from None
    except (ValueError, RuntimeError) as err:
        raise UserError(str(err).splitlines()[0] if str(err) else type(err).__name__) from None
    if args.json:
        print(json.dumps({"token_ids": token_ids}))
    else:
        print(",".join(str(t) for t in token_ids))
    sys.stdout.flush()
    return 0


def _run(args: argparse.Namespace, prompt: list[int]) -> list[int]:
    from impl.engine import EngineArgs, LLMEngine
    from impl.runner.config import load_model_config
    from impl.runner.sampling_params import SamplingParams

    config = load_model_config(args.model)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                            top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                            ignore_eos=args.ignore_eos)
    # One request: size the cache for exactly it instead of for max_position_embeddings.
    max_model_len = min(config.max_position_embeddings, len(prompt) + args.max_tokens)
    engine = LLMEngine(args.model, EngineArgs(
        block_size=args.block_size, max_num_seqs=1, max_model_len=max_model_len,
        max_num_batched_tokens=max(512, max_model_len),
        attention_backend=args.attention_backend, device=args.device))
    return engine.generate([prompt], params)[0].token_ids
