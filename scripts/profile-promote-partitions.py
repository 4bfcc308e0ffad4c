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
import glob, os, shutil, socket, subprocess, sys, tempfile, time
L = os.environ.get('LUA_DIR') or os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'crates', 'dq-core', 'src', 'store', 'scripts')
Ks = [int(k) for k in sys.argv[1:]] or [1, 2, 4, 16]
def rd(n): return open(os.path.join(L, n)).read()
pre = rd('record.lua') + "local publish = 'PUBLISH'\n" + rd('flow.lua')
push_src = pre + rd('add.lua') + rd('push.lua')
prom_src = pre + rd('handoff.lua') + rd('promote.lua')
def port():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close(); return p
def resp(*args):
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += [f"${len(a)}\r\n".encode(), a, b"\r\n"]
    return b"".join(out)
def packed(*fields):
    out = b""
    for f in fields:
        if isinstance(f, bytes):
            out += (bytes([0xa0 | len(f)]) if len(f) < 32 else bytes([0xd9, len(f)])) + f
        elif f < 128: out += bytes([f])
        else: out += bytes([0xcd]) + f.to_bytes(2, "big") if f < 65536 else bytes([0xce]) + f.to_bytes(4, "big")
    return out
P, R, W = int(os.environ.get('P', 16)), int(os.environ.get('ROUNDS', 100)), os.environ.get('W', '1') == '1'
rp = port(); work = tempfile.mkdtemp()
r = subprocess.Popen(['valgrind', '--tool=callgrind', f'--callgrind-out-file={work}/cg.out', 'redis-server', '--port', str(rp), '--save', '', '--appendonly', 'no', '--dir', work, '--logfile', work+'/r.log'], stderr=subprocess.DEVNULL)
def cli(*a): return subprocess.check_output(['redis-cli', '-p', str(rp), *a], stderr=subprocess.DEVNULL).decode().strip()
for _ in range(600):
    try: cli('ping'); break
    except Exception: time.sleep(0.1)
pref = [f"dq:{{0.{i}}}" for i in range(P)]
ch = f"{pref[0]}:wake:to:c1"
sub = subprocess.Popen(['redis-cli', '-p', str(rp), 'subscribe', ch], stdout=subprocess.DEVNULL)
time.sleep(1)
psha = cli('script', 'load', push_src); sha = cli('script', 'load', prom_src)
multi = "ARGV[8]" in prom_src
body = b'"' + b"x" * 62 + b'"'
def pushes(rnd):
    cmds = []
    for i, p in enumerate(pref):
        jid = f"j{rnd:05d}x{i:03d}"
        keys = [f"{p}:counts", f"{p}:delayed", f"{p}:job:{jid}", f"{p}:ready:t"]
        args = ["ch:ready", "ch:timer", jid, "t", bytes([0x97, 1]), 3600000, "", packed(b"t", body), packed(30000, 10, 3600000), "4", ""]
        cmds.append(resp("EVALSHA", psha, len(keys), *keys, *args))
        cmds.append(resp("ZADD", f"{p}:delayed", 1, jid))
    return b''.join(cmds)
def promotes(K):
    cmds = []
    for g in range(0, P, K):
        grp = pref[g:g + K]; p = grp[0]
        args = [p, 100, f"{p}:wake:ready", f"{p}:wake:timer", "0123456789abcdef0123456", ""]
        if multi: args += [len(grp) - 1, ""] + grp[1:]
        elif K > 1: sys.exit(f'{L}: this promote.lua takes one partition a call')
        if W: args += ["t", ch, P, 30000]
        cmds.append(resp("EVALSHA", sha, 4, f"{p}:delayed", f"{p}:counts", f"{p}:reserved", f"{p}:announced", *args))
    return b''.join(cmds)
def tot():
    subprocess.run(['callgrind_control', '-d', str(r.pid)], capture_output=True); time.sleep(0.3)
    f = max(glob.glob(work + '/cg.out.*'), key=lambda x: int(x.rsplit('.', 1)[1]))
    for line in open(f):
        if line.startswith(('summary:', 'totals:')): return int(line.split()[1])
n = 0
for K in Ks:
    for phase in ('warm', 'count'):
        pc = b''.join(pushes(n + k) for k in range(R)); n += R
        subprocess.run(['redis-cli', '-p', str(rp), '--pipe'], input=pc, capture_output=True)
        pr = b''.join(promotes(K) for _ in range(R))
        tot()
        o = subprocess.run(['redis-cli', '-p', str(rp), '--pipe'], input=pr, capture_output=True)
        c = tot()
    left = cli('zcard', f"{pref[0]}:delayed")
    print(f"calls of {K:2} partitions: {c / (R * P):9,.0f} instructions a job" + ("" if left == "0" else f" (jobs left in a delay set: {left})"))
r.kill(); sub.kill(); r.wait(); shutil.rmtree(work, ignore_errors=True)
