#!/usr/bin/env bash
# Prints a free TCP port on 127.0.0.1 between 20000 and 55535 whose port + 10000 is free too (a Redis
# Cluster node's bus port is its port + 10000: a taken bus port made a node refuse to start). Used by
# the benchmark scripts.
exec python3 -c '
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    p = random.randint(20000, 55535)
    if free(p) and free(p + 10000):
        print(p); break'
