"""The wire protocol between the harness and a worker process: typed msgpack frames on pipes.

Each frame is a 4-byte big-endian length and a msgspec msgpack body. The harness sends a
`Build` (a spec and an `EngineConfig`), a `Call` (system handle, method, arguments) or a
`Drop`; the worker answers every message with one `Reply`. Requests and answers are the
harness's own frozen dataclasses (`RequestSpec`, `Scheduled`, `SystemState`, ...), which
msgspec encodes as maps and decodes back into the same dataclasses: `METHODS` gives each
method's argument and return types, and both sides convert with them, so a worker answering
the wrong shape fails at the boundary with the method's name instead of deep in the driver.

`Scheduled.native` (the scheduler's own output object) never crosses the pipe: the worker keeps
it and sends an integer handle in its place, which `update` sends back.
"""

from __future__ import annotations

import struct
from typing import IO, Any

import msgspec

from conformance.systems.protocol import CacheEvent, RunnerOutput, Scheduled, SystemState, Update
from conformance.systems.transfer_records import BlockIds
from workloads.controls import ControlSpec
from workloads.model import EngineConfig, RequestSpec

PROTOCOL = "vtwin-worker/1"
_LENGTH = struct.Struct(">I")


class Hello(msgspec.Struct, tag="hello"):
    """The worker's first frame: protocol, Python and vLLM versions (None: no vLLM)."""

    protocol: str
    python: str
    vllm: str | None


class Build(msgspec.Struct, tag="build"):
    """Build a system from `spec` (an in-process spec, as the worker sees it) for `config`."""

    spec: str
    config: EngineConfig


class Call(msgspec.Struct, tag="call"):
    system: int
    method: str
    args: list[Any]


class Drop(msgspec.Struct, tag="drop"):
    """The harness is done with a system (its `close()`)."""

    system: int


Message = Build | Call | Drop


class Built(msgspec.Struct):
    system: int
    name: str
    none_hash: str


class Reply(msgspec.Struct):
    """One answer. `error` is set when the call raised: `kind` is the exception's type name
    and `trace` the worker-side traceback's last lines."""

    value: Any = None
    error: str | None = None
    kind: str | None = None
    trace: str | None = None


METHODS: dict[str, tuple[tuple[Any, ...], Any]] = {
    "add_request": ((RequestSpec, float), None),
    "abort": ((str,), bool),
    "has_requests": ((), bool),
    "schedule": ((), Scheduled),
    "update": ((int, RunnerOutput), Update),
    "update_draft_token_ids": ((list[tuple[str, list[int]]],), None),
    "block_tables": ((list[str],), dict[str, BlockIds]),
    "block_hashes": ((dict[str, int],), dict[str, tuple[str, ...]]),
    "state": ((), SystemState),
    "take_events": ((), tuple[CacheEvent, ...]),
    "check_integrity": ((), None),
    "control": ((ControlSpec,), bool | None),
    "compile_grammar": ((str, bool), None),
    "throttle_prefills": ((bool,), None),
    "resolve_deferred": ((int, list[tuple[str, list[int]]]), Scheduled),
}
"""Every `System` method: argument types and return type (`update` takes the handle of the
`Scheduled` it applies, not the object)."""

_encoder = msgspec.msgpack.Encoder()
_messages = msgspec.msgpack.Decoder(Message)
_replies = msgspec.msgpack.Decoder(Reply)
_hello = msgspec.msgpack.Decoder(Hello)


class Closed(EOFError):
    """The other end closed the pipe (for the harness: the worker died)."""


def write_frame(stream: IO[bytes], message: msgspec.Struct) -> None:
    body = _encoder.encode(message)
    stream.write(_LENGTH.pack(len(body)) + body)
    stream.flush()


def read_body(stream: IO[bytes]) -> bytes:
    head = _read_exactly(stream, _LENGTH.size)
    return _read_exactly(stream, _LENGTH.unpack(head)[0])


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise Closed("pipe closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_message(stream: IO[bytes]) -> Message:
    message: Message = _messages.decode(read_body(stream))
    return message


def read_reply(stream: IO[bytes]) -> Reply:
    reply: Reply = _replies.decode(read_body(stream))
    return reply


def read_hello(stream: IO[bytes]) -> Hello:
    hello: Hello = _hello.decode(read_body(stream))
    return hello


def convert(value: Any, kind: Any) -> Any:
    """`value` (as msgpack decoded it) as `kind`; None stands for "returns nothing"."""
    if kind is None:
        return None
    return msgspec.convert(value, kind)
