#!/usr/bin/env python3
"""A pull worker: reserve jobs of TOPIC... (highest priority first), handle them, ack or nack them.

    DQ_URL=http://127.0.0.1:6789 DQ_TOKEN=... python3 worker.py orders.close orders.remind

Standard library only. It reserves up to DQ_COUNT jobs (10) with a long poll of DQ_WAIT_MS (20000),
handles them one by one, acks the ones that succeeded in one request (ack many) and nacks each one that
failed with its error (dq retries it after its backoff, or moves it to the dead list after its last
attempt). While a job runs, a heartbeat touches every job of the batch still held before half of its
reservation has passed, so a long job is not handed to another worker (this uses the `deadline` dq sends,
on Redis's clock: keep this machine's clock in sync). SIGINT or SIGTERM: it stops reserving, finishes the
batch it holds (the long poll in flight ends within DQ_WAIT_MS) and exits 0; a second signal exits at once,
and what it held comes back after its TTR.
"""

import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

DQ_URL = os.environ.get("DQ_URL", "http://127.0.0.1:6789").rstrip("/")
DQ_TOKEN = os.environ.get("DQ_TOKEN", "")
COUNT = int(os.environ.get("DQ_COUNT", "10"))
WAIT_MS = int(os.environ.get("DQ_WAIT_MS", "20000"))


class ApiError(Exception):
    """dq answered with an error: `status` is the HTTP status, `code` dq's error code."""

    def __init__(self, status, code, message):
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code = status, code


def api(method, path, body=None, timeout=10):
    """One call to dq-server: the JSON answer (None for an empty one, e.g. 204), or ApiError."""
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


def job_path(job, verb):
    return f"/v1/jobs/{urllib.parse.quote(job['id'], safe=':')}/{verb}"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def handle(job):
    """Your work goes here. Raise to fail the job. This one prints the job; a body with "sleep_ms" takes
    that long, and a body with "fail" fails with that message."""
    body = job["body"]
    if isinstance(body, dict):
        if body.get("sleep_ms"):
            time.sleep(body["sleep_ms"] / 1000)
        if body.get("fail"):
            raise RuntimeError(str(body["fail"]))
    print(json.dumps({"id": job["id"], "topic": job["topic"], "attempt": job["attempt"], "body": body}), flush=True)


class Held:
    """The jobs this worker holds, and a heartbeat thread that touches each before its reservation ends."""

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = {}  # id -> (job, when to touch it next, local Unix ms)
        self.done = threading.Event()
        threading.Thread(target=self.heartbeat, daemon=True).start()

    @staticmethod
    def touch_at(deadline_ms):
        now = time.time() * 1000
        return now + max(deadline_ms - now, 0) / 2

    def add(self, job):
        with self.lock:
            self.jobs[job["id"]] = (job, self.touch_at(job["deadline"]))

    def drop(self, job):
        with self.lock:
            self.jobs.pop(job["id"], None)

    def heartbeat(self):
        while not self.done.wait(0.2):
            now = time.time() * 1000
            with self.lock:
                due = [job for job, at in self.jobs.values() if at <= now]
            for job in due:
                try:
                    answer = api("POST", job_path(job, "touch"), {"receipt": job["receipt"]})
                    with self.lock:
                        if job["id"] in self.jobs:
                            self.jobs[job["id"]] = (job, self.touch_at(answer["deadline"]))
                except ApiError as e:
                    if e.status in (404, 409):  # finished, or no longer ours: nothing to extend
                        self.drop(job)
                    log(f"touch {job['id']}: {e}")
                except (urllib.error.URLError, OSError) as e:
                    log(f"touch {job['id']}: {e}")  # tried again on the next beat


def ack_many(jobs, tries=3):
    """Acks `jobs` in one request, sending again the entries whose outcome dq could not give."""
    for attempt in range(1, tries + 1):
        if not jobs:
            return
        try:
            results = api("POST", "/v1/jobs/ack", {"acks": [{"id": j["id"], "receipt": j["receipt"]} for j in jobs]})["results"]
        except (ApiError, urllib.error.URLError, OSError) as e:
            if isinstance(e, ApiError) and e.status != 503:
                raise
            log(f"ack many ({len(jobs)} jobs), try {attempt}: {e}")
            time.sleep(0.2 * 2**attempt)
            continue
        again = []
        for job, result in zip(jobs, results):
            err = result.get("error")
            if err and err["code"] == "unavailable":
                again.append(job)
            elif err:  # stale_receipt: the reservation ended and the job is someone else's now
                log(f"ack {job['id']}: {err['code']}: {err['message']}")
        jobs = again
        if jobs:
            time.sleep(0.2 * 2**attempt)
    log(f"gave up acking {len(jobs)} jobs: they come back after their TTR")


def nack(job, error):
    """Fails `job`: dq retries it after its backoff, or moves it to the dead list after its last attempt."""
    try:
        api("POST", job_path(job, "nack"), {"receipt": job["receipt"], "error": error[:4000]})
    except (ApiError, urllib.error.URLError, OSError) as e:
        log(f"nack {job['id']}: {e} (it comes back after its TTR)")


def main():
    topics = sys.argv[1:]
    if not topics:
        sys.exit(f"usage: {sys.argv[0]} TOPIC [TOPIC...]")
    stop = threading.Event()

    def on_signal(signum, _frame):
        if stop.is_set():
            os._exit(128 + signum)
        log(f"signal {signum}: finishing the jobs held, then stopping")
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    held = Held()
    pause = 0.5
    while not stop.is_set():
        try:
            answer = api(
                "POST",
                "/v1/reserve",
                {"topics": topics, "count": COUNT, "timeout_ms": WAIT_MS},
                timeout=WAIT_MS / 1000 + 10,
            )
        except ApiError as e:
            if e.status in (400, 401, 403):
                sys.exit(f"reserve: {e}")  # a mistake to fix, not to retry
            log(f"reserve: {e}; again in {pause} s")
            time.sleep(pause)
            pause = min(pause * 2, 10)
            continue
        except (urllib.error.URLError, OSError) as e:
            log(f"reserve: {e}; again in {pause} s")
            time.sleep(pause)
            pause = min(pause * 2, 10)
            continue
        pause = 0.5
        jobs = answer["jobs"]
        for job in jobs:
            held.add(job)
        succeeded = []
        for job in jobs:
            try:
                handle(job)
                succeeded.append(job)
            except Exception as e:  # noqa: BLE001 - any failure of the work fails the job
                held.drop(job)
                nack(job, f"{type(e).__name__}: {e}")
        for job in succeeded:
            held.drop(job)
        ack_many(succeeded)
    held.done.set()
    log("stopped")


if __name__ == "__main__":
    main()
