#!/usr/bin/env bash
# Prints a free TCP port on 127.0.0.1 between 20000 and 55535 (below 55536: a Redis Cluster node's bus
# port is its port + 10000). Used by the benchmark scripts.
exec python3 -c '
import random, socket
while True:
    p = random.randint(20000, 55535)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass'
