"""What the profiling scripts share (profile-scripts.sh, profile-call-floor.py,
profile-promote-partitions.py): dq's scripts built as dq-core builds them, Redis's wire format and a
record's MessagePack, and a private redis-server run by valgrind's callgrind."""
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "dq-core", "src", "store", "scripts")


def script_text(lua, name):
    """`name`.lua of the scripts in `lua` with what dq-core puts in front of it (store/scripts/mod.rs):
    record.lua, the publish line and flow.lua, then add.lua (push, ack) or promote_plain.lua and
    handoff.lua (promote), each where that build has it (an earlier build's `LUA_DIR` may not)."""

    def part(f):
        p = os.path.join(lua, f)
        return open(p).read() if os.path.exists(p) else ""

    flow = part("flow.lua")
    pub = "" if name == "ack" and not flow else "local publish = 'PUBLISH'\n"
    extra = part("add.lua") if name in ("push", "ack") else ""
    if name == "promote":
        extra = part("promote_plain.lua") + part("handoff.lua")
    return part("record.lua") + pub + flow + extra + part(name + ".lua")


def resp(*args):
    """One command in Redis's wire format (for `redis-cli --pipe`)."""
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += [f"${len(a)}\r\n".encode(), a, b"\r\n"]
    return b"".join(out)


def packed(*fields):
    """MessagePack of the record's strings and small unsigned integers, as dq-core packs them."""
    out = b""
    for f in fields:
        if isinstance(f, bytes):
            out += (bytes([0xa0 | len(f)]) if len(f) < 32 else bytes([0xd9, len(f)])) + f
        elif f < 128:
            out += bytes([f])
        else:
            out += bytes([0xcd]) + f.to_bytes(2, "big") if f < 65536 else bytes([0xce]) + f.to_bytes(4, "big")
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class CallgrindRedis:
    """A private redis-server run by callgrind, until `stop`; `counted()` is the instructions since the
    last call of it."""

    def __init__(self):
        if not shutil.which("valgrind"):
            raise SystemExit("needs valgrind (apt-get install valgrind)")
        self.port, self.work = free_port(), tempfile.mkdtemp()
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.work}/cg.out", "redis-server", "--port",
             str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.work,
             "--logfile", f"{self.work}/redis.log"],
            stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                self.cli("ping")
                return
            except subprocess.CalledProcessError:
                time.sleep(0.1)

    def cli(self, *args):
        return subprocess.check_output(["redis-cli", "-p", str(self.port), *args],
                                       stderr=subprocess.DEVNULL).decode().strip()

    def pipe(self, commands):
        subprocess.run(["redis-cli", "-p", str(self.port), "--pipe"], input=commands, capture_output=True)

    def counted(self):
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], capture_output=True)
        time.sleep(0.3)
        last = max(glob.glob(f"{self.work}/cg.out.*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        for line in open(last):
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.work, ignore_errors=True)
