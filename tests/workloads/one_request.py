"""A one-request workload file's text under a given header `config` (and extra fields of the
request): what the field tests load to check a field's round trip and its one-line refusals."""

from __future__ import annotations

import json
from typing import Any


def text(config: dict[str, Any], **fields: Any) -> str:
    header = {"type": "header", "format": "vtwin-workload", "version": 1, "name": "x",
              "config": config}
    request = {"type": "request", "request_id": "a", "arrival_step": 0,
               "prompt": {"length": 20}, "max_tokens": 3, **fields}
    return json.dumps(header) + "\n" + json.dumps(request) + "\n"
