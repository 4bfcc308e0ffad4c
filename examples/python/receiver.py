#!/usr/bin/env python3
"""A callback receiver for push delivery: checks `X-DQ-Signature` and takes each job once.

    DQ_SECRETS=s3cr3t PORT=8080 python3 receiver.py

Register a topic whose callback it is:
    PUT /v1/topics/orders.close {"callback": {"url": "http://127.0.0.1:8080/hook", "secret": "s3cr3t"}}

Standard library only. DQ_SECRETS holds the keys it accepts, comma-separated (during a rotation, the new
and the old one). A request is taken when its signature, computed over the raw bytes received, matches
one of them (compared in constant time) and its timestamp is within 300 s of this machine's clock: then
200 with a JSON body (dq counts an empty answer, even a 204, as a failure and retries). A missing or bad
signature is 401. Delivery is at least once: a job id seen before is answered 200 and not handled again
(here in memory; use your database).
"""

import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRETS = [s.encode() for s in os.environ.get("DQ_SECRETS", "").split(",") if s]
LISTEN = (os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "8080")))
REPLAY_WINDOW_S = 300
MAX_BODY = 1 << 20


def verify(header, body, keys, now=None):
    """True when `header` (X-DQ-Signature: t=<unix s>,v1=<hex>[,v1=<hex>]) signs `body` with one of `keys`."""
    fields = [part.split("=", 1) for part in header.split(",") if "=" in part]
    ts = [v for k, v in fields if k == "t"]
    sigs = [v for k, v in fields if k == "v1"]
    if len(ts) != 1 or not ts[0].isdigit() or not sigs:
        return False
    if abs((now or time.time()) - int(ts[0])) > REPLAY_WINDOW_S:
        return False
    signed = ts[0].encode() + b"." + body
    ok = False
    for key in keys:
        expected = hmac.new(key, signed, hashlib.sha256).hexdigest()
        for sig in sigs:
            ok |= hmac.compare_digest(expected, sig)  # no early exit: every comparison is made
    return ok


seen_lock = threading.Lock()
print_lock = threading.Lock()
seen = set()


def handle(job):
    """Your work goes here (raise to have dq retry the job). This one prints the job."""
    line = json.dumps({"id": job["id"], "topic": job["topic"], "attempt": job["attempt"], "body": job["body"]})
    # The server answers on several threads: one write per line, under a lock, keeps lines whole.
    with print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Receiver(BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self.answer(413, {"error": "too large"})
        body = self.rfile.read(length)  # the raw bytes: the signature is over them, not over parsed JSON
        if not verify(self.headers.get("X-DQ-Signature", ""), body, SECRETS):
            return self.answer(401, {"error": "bad signature"})
        job = json.loads(body)
        with seen_lock:
            repeat = job["id"] in seen
        if not repeat:
            try:
                handle(job)
            except Exception as e:  # noqa: BLE001 - dq retries after the topic's backoff
                return self.answer(500, {"error": str(e)})
            with seen_lock:
                seen.add(job["id"])
        self.answer(200, {"ok": True})

    def log_message(self, fmt, *args):
        print(f"{self.address_string()} {fmt % args}", file=sys.stderr, flush=True)


def main():
    if not SECRETS:
        sys.exit("set DQ_SECRETS to the topic's secret (comma-separated during a rotation)")
    server = ThreadingHTTPServer(LISTEN, Receiver)

    def on_signal(_signum, _frame):
        threading.Thread(target=server.shutdown).start()  # shutdown() waits for serve_forever() to return

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"listening on http://{LISTEN[0]}:{server.server_port}", file=sys.stderr, flush=True)
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
