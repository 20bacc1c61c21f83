"""The ops HTTP endpoints (/health, /ready, /metrics) as tests read them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

HTTP_TIMEOUT_S = 5


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=HTTP_TIMEOUT_S) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def health(port: int) -> tuple[int, dict]:
    status, body = get(port, "/health")
    return status, json.loads(body)
