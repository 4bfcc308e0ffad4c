"""greenstalk's own test_initialize_watch_multiple (tests/test_greenstalk.py in greenstalk's repository), as
it is written there, against a fresh server: a client that watches two tubes reserves the jobs of both in
the order beanstalkd gives them (priority, then job id, across the tubes).

Usage: greenstalk_watch_multiple.py HOST:PORT (or BEANSTALKD_ADDR=HOST:PORT). The tubes `static` and
`dynamic` should be empty. Prints "ok" last; exits 1 with a message at the first answer that is not the
one expected.
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
    with greenstalk.Client((host, int(port)), watch=["static", "dynamic"]) as c:
        c.use("static")
        c.put("haskell")
        c.put("rust")
        c.use("dynamic")
        c.put("python")
        for want in ["haskell", "rust", "python"]:
            job = c.reserve(timeout=0)
            check("reserve over static and dynamic", job.body, want)
    print("ok")


main()
