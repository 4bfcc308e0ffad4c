"""A producer and a worker over the beanstalkd protocol with greenstalk, checking every answer.

Usage: greenstalk_client.py HOST:PORT (or BEANSTALKD_ADDR=HOST:PORT). Works in a tube of its own, which should be empty.
Prints "ok" last; exits 1 with a message at the first answer that is not the one expected.
"""

import os
import sys

import greenstalk


def check(what, got, want):
    if got != want:
        sys.exit(f"greenstalk: {what}: got {got!r}, want {want!r}")


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else os.environ["BEANSTALKD_ADDR"]
    host, port = addr.rsplit(":", 1)
    tube = "clients-py"
    with greenstalk.Client((host, int(port)), use=tube, watch=tube) as c:
        check("use", c.using(), tube)
        check("watch", c.watching(), [tube])

        first = c.put("first", priority=10, ttr=30)
        urgent = c.put("urgent", priority=1)
        later = c.put("later", delay=60)
        check("peek", c.peek(first).body, "first")
        check("peek-ready", c.peek_ready().id, urgent)
        check("peek-delayed", c.peek_delayed().id, later)
        check("stats-job of a delayed job", c.stats_job(later)["state"], "delayed")

        job = c.reserve(timeout=0)
        check("reserve takes the lowest priority", (job.id, job.body), (urgent, "urgent"))
        stats = c.stats_job(job)
        check("stats-job", (stats["tube"], stats["state"], stats["pri"], stats["ttr"]), (tube, "reserved", 1, 60))
        c.touch(job)
        c.release(job, priority=20)
        check("release sets the priority", c.stats_job(urgent)["pri"], 20)

        job = c.reserve(timeout=0)
        check("reserve after release", (job.id, job.body), (first, "first"))
        c.bury(job, priority=5)
        check("peek-buried", c.peek_buried().id, first)
        check("kick", c.kick(10), 1)
        check("kicked", c.stats_job(first)["kicks"], 1)
        c.kick_job(later)
        check("kick-job", c.stats_job(later)["state"], "ready")

        for want in [first, urgent, later]:
            job = c.reserve(timeout=0)
            check("reserve in priority order", job.id, want)
            c.delete(job)
        try:
            c.reserve(timeout=0)
            sys.exit("greenstalk: reserve on an empty tube: got a job, want TIMED_OUT")
        except greenstalk.TimedOutError:
            pass
        try:
            c.delete(first)
            sys.exit("greenstalk: delete of a deleted job: no error, want NOT_FOUND")
        except greenstalk.NotFoundError:
            pass
    print("ok")


main()
