#!/usr/bin/env python3
"""Push COUNT jobs to TOPIC, each due DELAY_MS from now, and print each job's id on its own line.

    DQ_URL=http://127.0.0.1:6789 DQ_TOKEN=... python3 producer.py orders.close 10 30000

Standard library only. Each job gets an id made here, so a push whose answer was lost (a timeout, a
dropped connection, a 503) can be sent again safely: dq never stores the same id twice, and a 409
`conflict` on such a retry means the first try was stored.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

DQ_URL = os.environ.get("DQ_URL", "http://127.0.0.1:6789").rstrip("/")
DQ_TOKEN = os.environ.get("DQ_TOKEN", "")


class ApiError(Exception):
    """dq answered with an error: `status` is the HTTP status, `code` dq's error code."""

    def __init__(self, status, code, message):
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code = status, code


def api(method, path, body=None, timeout=10):
    """One call to dq-server: the JSON answer (None for an empty one), or ApiError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(DQ_URL + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")  # dq refuses a body declared otherwise
    if DQ_TOKEN:
        req.add_header("Authorization", "Bearer " + DQ_TOKEN)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        try:
            err = json.loads(e.read())["error"]
        except (ValueError, KeyError, TypeError):
            err = {"code": "http_error", "message": e.reason}
        raise ApiError(e.code, err.get("code"), err.get("message")) from None
    return json.loads(raw) if raw.strip() else None


def push(job, tries=5):
    """Pushes `job` (which has an `id`), retrying what may not have been stored with the same id."""
    for attempt in range(1, tries + 1):
        try:
            return api("POST", "/v1/jobs", job)
        except ApiError as e:
            if e.code == "conflict" and attempt > 1:
                return {"id": job["id"], "state": "stored by an earlier try"}
            if e.status != 503 or attempt == tries:
                raise
        except (urllib.error.URLError, OSError):
            if attempt == tries:
                raise
        time.sleep(0.2 * 2**attempt)


def main():
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} TOPIC [COUNT] [DELAY_MS]")
    topic = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    delay_ms = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    for n in range(count):
        job = {"id": str(uuid.uuid4()), "topic": topic, "body": {"n": n}, "delay_ms": delay_ms}
        answer = push(job)
        print(answer["id"], flush=True)


if __name__ == "__main__":
    main()
