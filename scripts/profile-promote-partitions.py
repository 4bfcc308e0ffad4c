#!/usr/bin/env python3
"""What promote.lua costs a job when one call promotes several partitions (a timer's partitions due at one
moment): the instructions (valgrind's callgrind, the same from run to run) a job, with one due job in each
of P partitions, promoted in calls of K partitions, on a private redis-server.

    scripts/profile-promote-partitions.py [K ...]        calls of 1, 2, 4 and 16 partitions by default
    LUA_DIR=<dir> scripts/profile-promote-partitions.py 1   another build's scripts (one partition a call
                                                         where its promote.lua takes one)
    W=0 scripts/profile-promote-partitions.py            no waiting worker (the plain promotion); by
                                                         default a worker waits, listened to: every job handed
    P=16 ROUNDS=100                                      partitions, and rounds counted (after one to warm up)

docs/operations.md (Capacity) has its figures. Needs valgrind (apt-get install valgrind).
"""
import os
import subprocess
import sys

from profiling import LUA, CallgrindRedis, packed, resp, script_text

P, ROUNDS, WAITS = int(os.environ.get("P", 16)), int(os.environ.get("ROUNDS", 100)), os.environ.get("W", "1") == "1"
BODY = b'"' + b"x" * 62 + b'"'


def main():
    lua = os.environ.get("LUA_DIR") or LUA
    ks = [int(k) for k in sys.argv[1:]] or [1, 2, 4, 16]
    promote = script_text(lua, "promote")
    # A promote.lua that takes several partitions reads their number at ARGV 7.
    multi = "ARGV[8]" in promote
    if not multi and max(ks) > 1:
        sys.exit(f"{lua}: this promote.lua takes one partition a call")
    redis = CallgrindRedis()
    prefixes = [f"dq:{{0.{i}}}" for i in range(P)]
    channel = f"{prefixes[0]}:wake:to:c1"
    # The waiting worker's process: a client on its channel, so every publish reaches someone.
    listener = subprocess.Popen(["redis-cli", "-p", str(redis.port), "subscribe", channel], stdout=subprocess.DEVNULL)
    try:
        while redis.cli("pubsub", "numsub", channel).split()[-1] != "1":
            pass
        push_sha = redis.cli("script", "load", script_text(lua, "push"))
        sha = redis.cli("script", "load", promote)

        def pushes(rnd):
            """One job in each partition, pushed as dq-server packs it, then made due."""
            cmds = []
            for i, p in enumerate(prefixes):
                jid = f"j{rnd:05d}x{i:03d}"
                keys = [f"{p}:counts", f"{p}:delayed", f"{p}:job:{jid}", f"{p}:ready:t"]
                args = ["ch:ready", "ch:timer", jid, "t", bytes([0x97, 1]), 3600000, "", packed(b"t", BODY),
                        packed(30000, 10, 3600000), "4", ""]
                cmds.append(resp("EVALSHA", push_sha, len(keys), *keys, *args))
                cmds.append(resp("ZADD", f"{p}:delayed", 1, jid))
            return b"".join(cmds)

        def promotions(k):
            """The partitions' promotions, `k` partitions a call."""
            cmds = []
            for g in range(0, P, k):
                group = prefixes[g:g + k]
                p = group[0]
                args = [p, 100, f"{p}:wake:ready", f"{p}:wake:timer", "0123456789abcdef0123456", ""]
                if multi:
                    args += [len(group) - 1, ""] + group[1:]
                if WAITS:
                    args += ["t", channel, P, 30000]
                cmds.append(resp("EVALSHA", sha, 4, f"{p}:delayed", f"{p}:counts", f"{p}:reserved", f"{p}:announced",
                                 *args))
            return b"".join(cmds)

        n = 0
        for k in ks:
            for _ in ("warm", "counted"):
                redis.pipe(b"".join(pushes(n + r) for r in range(ROUNDS)))
                n += ROUNDS
                calls = b"".join(promotions(k) for _ in range(ROUNDS))
                redis.counted()
                redis.pipe(calls)
                c = redis.counted()
            left = redis.cli("zcard", f"{prefixes[0]}:delayed")
            note = "" if left == "0" else f" (jobs left in a delay set: {left})"
            print(f"calls of {k:2} partitions: {c / (ROUNDS * P):9,.0f} instructions a job{note}")
    finally:
        listener.kill()
        redis.stop()


if __name__ == "__main__":
    main()
