#!/usr/bin/env python3
"""What a script call costs Redis before a job's own work: the instructions (valgrind's callgrind, the same
from run to run) of one EVALSHA, each call made 2,000 times (after a round to warm up) with promote.lua's
4 keys and 12 arguments (a waiting worker's 4 among them), on a private redis-server.

    scripts/profile-call-floor.py                 the default set: an empty script, the preambles, a few
                                                  commands and conversions, and promote.lua with nothing due
    scripts/profile-call-floor.py NAME=LUA ...    your own: LUA is files of crates/dq-core/src/store/scripts
                                                  joined with `+` (`PUB`: the line scripts.rs puts before
                                                  flow.lua), then optionally `inline:<code>`

docs/operations.md (Capacity) has its figures. Needs valgrind (apt-get install valgrind).
"""
import os
import sys

from profiling import LUA, CallgrindRedis, resp

N = 2000
DEFAULT = [
    "empty=inline:return 1",
    "record.lua=record.lua+inline:return 1",
    "record+flow+promote parts=record.lua+PUB+flow.lua+promote_plain.lua+handoff.lua+inline:return 1",
    "TIME=inline:redis.call('TIME') return 1",
    "TIME as ms=inline:local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) return 1",
    "EXISTS=inline:redis.call('EXISTS', KEYS[1]) return 1",
    "ZRANGE 0 1 WITHSCORES, empty=inline:redis.call('ZRANGE', KEYS[1], '0', '1', 'WITHSCORES') return 1",
    "ZADD, score a number=inline:redis.call('ZADD', KEYS[3], 1795802472777 + #ARGV, 'x') return 1",
    "ZADD, score as %d=inline:redis.call('ZADD', KEYS[3], string.format('%d', 1795802472777 + #ARGV), 'x') return 1",
    "10 x tonumber(s)=inline:local x for i = 1, 10 do x = tonumber(ARGV[2]) end return 1",
    "10 x s + 0=inline:local x for i = 1, 10 do x = ARGV[2] + 0 end return 1",
    "10 x a table of two=inline:local x for i = 1, 10 do x = {a = 1, b = 2} end return 1",
    "promote.lua, nothing due=record.lua+PUB+flow.lua+promote_plain.lua+handoff.lua+promote.lua",
]


def source(spec):
    """The script `spec` names: files joined with `+`, and `inline:<code>` last (its code may hold `+`)."""
    files, _, inline = spec.partition("inline:")
    parts = []
    for p in [f for f in files.split("+") if f]:
        if p == "PUB":
            parts.append("local publish = 'PUBLISH'\n")
        else:
            parts.append(open(os.path.join(LUA, p)).read())
    return "\n".join(parts + [inline])


def main():
    redis = CallgrindRedis()
    try:
        p = "dq:{0.1}"
        keys = [f"{p}:delayed", f"{p}:counts", f"{p}:reserved", f"{p}:announced"]
        args = [p, 1, "ch:ready", "ch:timer", "nonce", "", "0", "", "t", f"{p}:handoff:c1", 1, 30000]
        for spec in sys.argv[1:] or DEFAULT:
            name, lua = spec.split("=", 1)
            sha = redis.cli("script", "load", source(lua))
            calls = b"".join(resp("EVALSHA", sha, len(keys), *keys, *args) for _ in range(N))
            for _ in ("warm", "counted"):
                redis.counted()
                redis.pipe(calls)
                n = redis.counted()
            print(f"{name:40} {n / N:10,.0f} instructions a call")
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
