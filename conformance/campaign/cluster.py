"""Ray, started or joined, and the campaign's actors on it.

A local campaign starts an embedded Ray with one CPU per core of this machine (`--workers N`
fewer); `--address` joins a running cluster (`ray start --head` on one machine, `ray start
--address HEAD:6379` on the others). Either way, one actor per CPU Ray offers, each with one
CPU, and every actor gets the oracle's environment variables through Ray's `runtime_env`, so
no worker depends on how its node was started. A worker that cannot run a system, or (on a
cluster) runs other vtwin code than the driver, stops the campaign before its first task with
one line per machine.
"""

from __future__ import annotations

import os
from typing import Any

from conformance.campaign.plan import Plan
from conformance.campaign.worker import CampaignWorker, WorkerInfo, code_digest
from vtwin.errors import UserError

MAX_RETRIES = 3
WORKER_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
              "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "WARNING",
              "TOKENIZERS_PARALLELISM": "false"}
"""Set in every actor (Ray's runtime_env), with this process's PYTHONHASHSEED (default 0):
each system derives NONE_HASH from it, so all workers must agree."""


def worker_env() -> dict[str, str]:
    return {**WORKER_ENV, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}


def start_ray(plan: Plan) -> bool:
    """Connect to Ray; True when this call started it (and so must stop it)."""
    import ray

    if ray.is_initialized():
        return False
    env = {"env_vars": worker_env()}
    if plan.address is not None:
        try:
            ray.init(address=plan.address, runtime_env=env, log_to_driver=False)
        except Exception as err:
            hint = ("" if os.environ.get("RAY_AUTH_MODE") else
                    "; a cluster with token authentication (Ray's default) needs "
                    "RAY_AUTH_MODE=token here and its token in ~/.ray/auth_token")
            raise UserError(f"--address {plan.address}: cannot join the Ray cluster: "
                            f"{' '.join(str(err).split())[:300]}{hint}") from None
    else:
        # "local": always a new instance of our own, never whatever cluster this machine
        # last joined (ray.init() without an address would connect to that).
        ray.init(address="local", num_cpus=plan.workers or os.cpu_count() or 1, runtime_env=env,
                 object_store_memory=128 * 2**20, include_dashboard=False,
                 log_to_driver=False)
    return True


def start_workers(plan: Plan) -> tuple[list[Any], tuple[WorkerInfo, ...]]:
    """One actor per core, each with its systems started (or a one-line error per machine)."""
    import ray

    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    count = plan.workers or max(int(resources.get("CPU", 1)), 1)
    remote: Any = ray.remote(CampaignWorker)
    actor_class = remote.options(
        num_cpus=1, max_restarts=-1, max_task_retries=MAX_RETRIES,
        runtime_env={"env_vars": worker_env()})
    actors = [actor_class.remote(plan.systems) for _ in range(count)]
    infos: tuple[WorkerInfo, ...] = tuple(ray.get([a.prepare.remote() for a in actors]))
    problems = sorted({f"{i.host}: {i.error}" for i in infos if i.error is not None})
    if plan.address is not None:
        ours = code_digest()
        problems += sorted({f"{i.host}: runs other vtwin code (digest {i.code}, this "
                            f"checkout {ours}): check out the same commit there"
                            for i in infos if i.code != ours})
    if problems:
        for actor in actors:
            ray.kill(actor)
        raise UserError(f"campaign workers cannot run {plan.systems_key}: "
                        + "; ".join(problems))
    return actors, infos
