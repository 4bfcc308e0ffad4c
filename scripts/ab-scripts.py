#!/usr/bin/env python3
"""Two (or more) builds' promote.lua, reserve.lua and ack.lua on the same jobs, in one Redis, side by side.

    scripts/ab-scripts.py [--keys N] [--jobs N] [--per-call N] [--dq-server PATH] SCRIPTS_DIR SCRIPTS_DIR ...

A whole job's life measured end to end (scripts/bench.sh) moves with everything else on the machine, so
a few µs per job between two builds hide in its noise. This measures the two scripts that move a due job
alone: a private Redis (pinned to CPU 0 when `taskset` is there), a dq-server that pushes `--jobs` jobs
(with `--keys` distinct flow keys, 0 for none) due 4 s later and then stops, then each delay set promoted
until empty, each ready queue reserved 64 at a time until empty, and the jobs acked 64 at a time
(kept done for an hour, as dq-consumer acks), by hand. `--per-call N` moves, reserves and acks N jobs a
call instead (1: what a call costs with one job in it, as on a push path where jobs come due apart). Each SCRIPTS_DIR is a
build's crates/dq-core/src/store/scripts (an older one: `git archive REV crates/dq-core/src/store/scripts
| tar -x -C /tmp/old`); the builds take the calls in turn, so all run through the same minutes on
the same data, and every call is timed by Redis's slowlog. Prints, per build, Redis's µs per job in each
script. The builds must share the record format the dq-server writes (the push is this dq-server's).
"""
import argparse, collections, json, os, shutil, socket, subprocess, tempfile, time, urllib.request, uuid

from profiling import free_port, script_text


class Redis:
    """Just enough RESP to send commands and read their answers."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected answer {line!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--per-call", type=int, default=0)
    ap.add_argument("--dq-server", default="target/release/dq-server")
    ap.add_argument("builds", nargs="+")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    rport, sport = free_port(), free_port()
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    redis = subprocess.Popen(pin + ["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no",
                                    "--dir", tmp], stdout=subprocess.DEVNULL)
    server = None
    try:
        for _ in range(100):
            try:
                r = Redis(rport)
                break
            except OSError:
                time.sleep(0.05)
        env = dict(os.environ, DQ__REDIS__URLS=f"redis://127.0.0.1:{rport}", DQ__SERVER__LISTEN=f"127.0.0.1:{sport}",
                   DQ__BEANSTALKD__LISTEN=f"127.0.0.1:{free_port()}", DQ__LOG__LEVEL="warn")
        server = subprocess.Popen([args.dq_server], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(400):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{sport}/healthz")
                break
            except OSError:
                time.sleep(0.05)
        due = int(time.time() * 1000) + 4000
        for first in range(0, args.jobs, 1000):
            jobs = []
            for i in range(first, min(first + 1000, args.jobs)):
                job = {"topic": "ab", "body": {"i": i}, "run_at": due}
                if args.keys:
                    job["flow_key"] = f"key-{i % args.keys}"
                jobs.append(job)
            req = urllib.request.Request(f"http://127.0.0.1:{sport}/v1/jobs/batch",
                                         data=json.dumps({"jobs": jobs}).encode(),
                                         headers={"content-type": "application/json"}, method="POST")
            urllib.request.urlopen(req).read()
        server.terminate()
        server.wait()
        while time.time() * 1000 < due + 200:
            time.sleep(0.1)
        # Each as dq-server loads it on a single Redis (profiling.script_text).
        shas = [(r.cmd("SCRIPT", "LOAD", script_text(d, "promote")).decode(),
                 r.cmd("SCRIPT", "LOAD", script_text(d, "reserve")).decode(),
                 r.cmd("SCRIPT", "LOAD", script_text(d, "ack")).decode()) for d in args.builds]
        prefixes, cursor = [], b"0"
        while True:
            cursor, got = r.cmd("SCAN", cursor, "MATCH", "dq:*:delayed", "COUNT", 1000)
            prefixes += [k[: -len(b":delayed")] for k in got]
            if cursor == b"0":
                break
        prefixes.sort()
        r.cmd("CONFIG", "SET", "slowlog-log-slower-than", 0)
        r.cmd("CONFIG", "SET", "slowlog-max-len", 1000000)
        r.cmd("SLOWLOG", "RESET")
        moved, taken, acked = collections.Counter(), collections.Counter(), collections.Counter()
        # The builds take the calls in turn (so, in calls of many jobs, the partitions): each call's build
        # is the next one's, whichever partition it is in, so no build gets the first or last calls of a
        # partition more often than another. (A call that finds the partition empty hands its turn on to the
        # next partition's first call, so the empty calls too fall to the builds in turn.)
        turn = 0
        for p in prefixes:
            while True:
                b, turn = turn % len(shas), turn + 1
                out = r.cmd("EVALSHA", shas[b][0], 4, p + b":delayed", p + b":counts", p + b":reserved", p + b":announced",
                            p, args.per_call or 1000, p + b":wake:ready", p + b":wake:timer", uuid.uuid4().hex, "")
                # (A build whose promote.lua may take several partitions answers per partition.)
                n = out[0][0] if isinstance(out[0], list) else out[0]
                moved[b] += n
                if n == 0:
                    turn -= 1
                    break
        for p in prefixes:
            while True:
                b, turn = turn % len(shas), turn + 1
                out = r.cmd("EVALSHA", shas[b][1], 4, p + b":reserved", p + b":counts", p + b":announced", p + b":ready:ab",
                            p, args.per_call or 64, uuid.uuid4().hex, "", p + b":wake:timer", "", "0 0 0")
                got = (len(out) - 1) // 10
                taken[b] += got
                if got == 0:
                    turn -= 1
                    break
                # The jobs taken, acked at once: KEYS the reserved set, counts, numbers' index and the
                # records; ARGV the retention, then per job its id, receipt and three empty values (no
                # attempt entry, no pushes, no answer).
                ids = [out[10 * k] for k in range(got)]
                argv = [x for k in range(got) for x in (out[10 * k], out[10 * k + 4], "", "", "")]
                done = r.cmd("EVALSHA", shas[b][2], 3 + got, p + b":reserved", p + b":counts", p + b":bs:ids",
                             *[p + b":job:" + i for i in ids], 3600000, *argv)
                acked[b] += sum(1 for x in done if x == 1)
        us = collections.Counter()
        for entry in r.cmd("SLOWLOG", "GET", -1):
            words = entry[3]
            if words and words[0].lower() == b"evalsha":
                us[words[1].decode()] += entry[2]
        # Builds whose script is the same text share its SHA1, so its time is over all their jobs.
        jobs = collections.Counter()
        for b, (pro, res, ack) in enumerate(shas):
            jobs[pro] += moved[b]
            jobs[res] += taken[b]
            jobs[ack] += acked[b]
        for b, d in enumerate(args.builds):
            pro, res, ack = shas[b]
            print(f"{d}: promote {moved[b]} jobs, {us[pro] / max(jobs[pro], 1):.2f} µs a job; "
                  f"reserve {taken[b]} jobs, {us[res] / max(jobs[res], 1):.2f} µs a job; "
                  f"ack {acked[b]} jobs, {us[ack] / max(jobs[ack], 1):.2f} µs a job")
    finally:
        if server and server.poll() is None:
            server.kill()
        redis.kill()
        redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
