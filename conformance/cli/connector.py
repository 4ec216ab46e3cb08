"""`vtwin connector-check`: a KV connector's scheduler side under upstream's scheduler, with
the contract checked after every call (`conformance.connector.check`)."""

from __future__ import annotations

import argparse
import sys

DEFAULT_CONNECTOR = ("vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector"
                     ":SimpleCPUOffloadConnector")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = subparsers.add_parser(
        "connector-check", help="run a KV connector through upstream's scheduler and check "
                                "the connector contract (promises, loads, hits by source, "
                                "leaks)",
        description="Plug a KV connector class into upstream vLLM's scheduler, run workloads "
                    "with the GPU pool cut so prefixes come back from the connector, and "
                    "report every contract violation (one line each); exit 1 if any.")
    check.add_argument("--connector", default=DEFAULT_CONNECTOR, metavar="MODULE:CLASS",
                       help="the connector class (default: upstream's SimpleCPUOffloadConnector)")
    check.add_argument("--workload", action="append", metavar="NAME|FILE", dest="workloads",
                       help="suite entries, bundled workloads or files (default: multi-turn, "
                            "offload-sessions, preemption-storm)")
    check.add_argument("--load-latency", type=int, default=1, metavar="STEPS",
                       help="steps a load takes (default 1)")
    check.add_argument("--settings", choices=("simple_cpu_offload", "offloading", "nixl"),
                       default="simple_cpu_offload",
                       help="the settings the connector is given: SimpleCPUOffload's (default), "
                            "the OffloadingConnector's (for it or a subclass of it: its "
                            "jobs are played by the harness's job worker) or the NIXL P/D "
                            "connector's, pull or push mode (pulls, registrations and "
                            "reads played by the P/D worker; the workload's requests take "
                            "turns as decodes and prefills)")
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    from conformance.connector.check import check_connector
    from conformance.sched.offload_suite import with_offload
    from conformance.sched.startup import log_counts, upstream_log_path, upstream_logs
    from conformance.sched.suite import resolve_workload

    names = args.workloads or ["multi-turn", "offload-sessions", "preemption-storm"]
    workloads = [resolve_workload(name)[0] for name in names]  # every name checked first
    log_path = upstream_log_path("connector-check")
    dirty = steps = 0
    with upstream_logs(log_path) as counts:
        for workload in workloads:
            if workload.config.kv_connector is None:
                workload = with_offload(workload, {"simple_cpu_offload": "eager",
                                                   "nixl": "pd"}.get(args.settings,
                                                                     "offloading"))
            report = check_connector(args.connector, workload,
                                     load_latency_steps=args.load_latency,
                                     settings=args.settings)
            calls = ", ".join(f"{k} {v}" for k, v in sorted(report.calls.items()))
            verdict = "clean" if report.clean else f"{len(report.violations)} violation(s)"
            print(f"vtwin connector-check: {workload.name}: {report.steps} steps, {verdict} "
                  f"({calls})", file=sys.stderr)
            for line in report.violations[:20]:
                print(f"  {line}", file=sys.stderr)
            dirty += not report.clean
            steps += report.steps
    if counts:
        print(f"vtwin connector-check: upstream logs: {log_counts(dict(counts))} -> {log_path}",
              file=sys.stderr)
    verdict = "every workload clean" if not dirty else f"{dirty} with violations"
    print(f"vtwin connector-check: {args.connector.rpartition(':')[2]}: {len(workloads)} "
          f"workloads, {steps} steps, {verdict}", file=sys.stderr)
    return 1 if dirty else 0


