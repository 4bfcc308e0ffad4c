"""Schemathesis hooks for dq's OpenAPI document (loaded through SCHEMATHESIS_HOOKS by schemathesis.rs).

The document names a format for each string whose rule JSON Schema cannot state; these strategies draw
valid ones, so a request valid by the document is valid for the server. Invalid ones are the server's
own tests (tests/bad_input.rs, tests/topics_api.rs, tests/schedules_api.rs).
"""

import os
import time

import schemathesis
from hypothesis import strategies as st

# The server's `limits.max_delay_ms` (schemathesis.rs passes it).
MAX_DELAY_MS = int(os.environ["DQ_MAX_DELAY_MS"])

# An http(s) URL whose host is a name (checked at connect) or an address the egress policy allows.
schemathesis.openapi.format(
    "dq-callback-url",
    st.sampled_from(
        [
            "http://hooks.example/close",
            "https://hooks.example:8443/dq?topic=a",
            "http://10.0.0.5:8080/hooks/order-close",
            "https://user:pw@hooks.example/dead",
        ]
    ),
)
# A retry condition (docs/api.md, Retry conditions).
schemathesis.openapi.format(
    "dq-condition",
    st.sampled_from(
        [
            "{res.code} != 200 && {res.data.status} != 2",
            "{res.code} == 200 || {res.data.msg} == 'fail'",
            "{http.status} == 202",
            "{res.items.0.state} == \"pending\"",
        ]
    ),
)
# A glob of topic names (`callback.allow_push`).
schemathesis.openapi.format("dq-topic-glob", st.sampled_from(["mail.*", "review", "*", "order-?"]))
# A cron pattern that matches: 5 fields, or 6 with seconds first.
schemathesis.openapi.format(
    "dq-cron",
    st.sampled_from(["*/5 * * * *", "30 7 * * MON-FRI", "*/10 * * * * *", "0 0 1 * *", "@daily"]),
)
# A W3C tracestate list (docs/api.md, Trace context); the empty list is none.
schemathesis.openapi.format(
    "dq-tracestate",
    st.sampled_from(
        ["congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE", "tenant@vendor=a b;c", ""]
    ),
)
# An IANA time zone.
schemathesis.openapi.format(
    "dq-timezone", st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"])
)


def _integers_as_written(value):
    """`84365.0` as `84365`, but inside a job's `body` (any JSON, kept as sent)."""
    if isinstance(value, dict):
        return {k: v if k == "body" else _integers_as_written(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers_as_written(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def _run_at_within_the_horizon(value):
    """A `run_at` past now + `limits.max_delay_ms` as that bound (as the document says in words)."""
    if isinstance(value, dict):
        latest = int(time.time() * 1000) + MAX_DELAY_MS
        run_at = value.get("run_at")
        # Only values the document allows (int64): one past that is a drawn invalid value, kept.
        if isinstance(run_at, int) and not isinstance(run_at, bool) and latest < run_at < 2**63:
            value = {**value, "run_at": latest}
        for key in ("jobs", "push"):
            if isinstance(value.get(key), list):
                value = {**value, key: [_run_at_within_the_horizon(j) for j in value[key]]}
    return value


@schemathesis.hook
def map_body(context, body):
    # JSON Schema counts 84365.0 as an integer; dq (serde) reads an integer field only as written
    # without a fraction (the document says so in its description). Python's json writes a float with
    # `.0`, so drawn integers that hypothesis made floats are sent as integers.
    #
    # `run_at`'s upper bound moves with the clock, so the document gives it in words, not as a
    # `maximum`: a drawn `run_at` beyond it is sent as the bound.
    #
    # A callback `secret` of `***` (the mask the API shows) keeps the stored secret, and is refused when
    # the topic has none: valid or not by the server's state, which the document cannot say. Sent as a
    # real secret; tests/topics_api.rs covers the mask.
    return _no_mask(_run_at_within_the_horizon(_integers_as_written(body)))


def _no_mask(value):
    """A callback's `secret` or `previous_secret` of `***` as a real secret."""
    if isinstance(value, dict) and isinstance(value.get("callback"), dict):
        callback = dict(value["callback"])
        for key in ("secret", "previous_secret"):
            if callback.get(key) == "***":
                callback[key] = "s3cr3t"
        value = {**value, "callback": callback}
    return value
