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
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "..", "crates", "dq-core", "src", "store", "scripts")
N = 2000
DEFAULT = [
    "empty=inline:return 1",
    "record.lua=record.lua+inline:return 1",
    "record+flow+handoff=record.lua+PUB+flow.lua+handoff.lua+inline:return 1",
    "TIME=inline:redis.call('TIME') return 1",
    "TIME as ms=inline:local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) return 1",
    "EXISTS=inline:redis.call('EXISTS', KEYS[1]) return 1",
    "ZRANGE 0 1 WITHSCORES, empty=inline:redis.call('ZRANGE', KEYS[1], '0', '1', 'WITHSCORES') return 1",
    "ZADD, score a number=inline:redis.call('ZADD', KEYS[3], 1795802472777 + #ARGV, 'x') return 1",
    "ZADD, score as %d=inline:redis.call('ZADD', KEYS[3], string.format('%d', 1795802472777 + #ARGV), 'x') return 1",
    "10 x tonumber(s)=inline:local x for i = 1, 10 do x = tonumber(ARGV[2]) end return 1",
    "10 x s + 0=inline:local x for i = 1, 10 do x = ARGV[2] + 0 end return 1",
    "10 x a table of two=inline:local x for i = 1, 10 do x = {a = 1, b = 2} end return 1",
    "promote.lua, nothing due=record.lua+PUB+flow.lua+handoff.lua+promote.lua",
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


def resp(*args):
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = str(a).encode()
        out += [f"${len(a)}\r\n".encode(), a, b"\r\n"]
    return b"".join(out)


def main():
    if not shutil.which("valgrind"):
        sys.exit("needs valgrind (apt-get install valgrind)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    work = tempfile.mkdtemp()
    redis = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/cg.out", "redis-server", "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", work, "--logfile", f"{work}/redis.log"],
        stderr=subprocess.DEVNULL)

    def cli(*a):
        return subprocess.check_output(["redis-cli", "-p", str(port), *a], stderr=subprocess.DEVNULL).decode().strip()

    def counted():
        """The instructions since the last dump (it dumps again)."""
        subprocess.run(["callgrind_control", "-d", str(redis.pid)], capture_output=True)
        time.sleep(0.3)
        last = max(glob.glob(f"{work}/cg.out.*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        for line in open(last):
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
        return 0

    try:
        for _ in range(600):
            try:
                cli("ping")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.1)
        p = "dq:{0.1}"
        keys = [f"{p}:delayed", f"{p}:counts", f"{p}:reserved", f"{p}:announced"]
        args = [p, 1, "ch:ready", "ch:timer", "nonce", "", "0", "", "t", f"{p}:handoff:c1", 1, 30000]
        for spec in sys.argv[1:] or DEFAULT:
            name, lua = spec.split("=", 1)
            sha = cli("script", "load", source(lua))
            calls = b"".join(resp("EVALSHA", sha, len(keys), *keys, *args) for _ in range(N))
            for _ in ("warm", "counted"):
                counted()
                subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=calls, capture_output=True)
                n = counted()
            print(f"{name:40} {n / N:10,.0f} instructions a call")
    finally:
        redis.kill()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
