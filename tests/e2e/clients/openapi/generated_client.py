"""A client that openapi-python-client generated from dq-server's /openapi.json, used as a user would.

Usage: generated_client.py <package dir> <base URL> <token>

Pushes, looks up, reserves, acks, registers a topic, puts a schedule and reads stats; every 2xx answer
must parse into the model the document names (never None, never a bare dict), else it exits non-zero.
Prints "ok" last when everything held.
"""

import sys

sys.path.insert(0, sys.argv[1])

from dq_client import AuthenticatedClient  # noqa: E402
from dq_client.api.consume import ack, reserve  # noqa: E402
from dq_client.api.jobs import lookup, push, push_many, reschedule  # noqa: E402
from dq_client.api.operations import stats  # noqa: E402
from dq_client.api.schedules import get_schedule, put_schedule  # noqa: E402
from dq_client.api.topics import get_topic, list_topics, put_topic  # noqa: E402
from dq_client.models import (  # noqa: E402
    AckRequest,
    BatchAnswer,
    BatchRequest,
    Callback,
    Job,
    PushAnswer,
    PushRequest,
    RescheduleRequest,
    Reserved,
    ReserveRequest,
    Retry,
    ScheduleConfig,
    ScheduleView,
    State,
    Stats,
    TopicConfig,
    TopicList,
    TopicView,
)

base, token = sys.argv[2], sys.argv[3]
client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)


def answer(resp, status, model):
    """The parsed answer of `resp`, which must have `status` and parse into `model`."""
    body = resp.content.decode(errors="replace")
    assert resp.status_code == status, f"{resp.status_code} {body}"
    assert isinstance(resp.parsed, model), f"{type(resp.parsed).__name__} is not {model.__name__}: {body}"
    return resp.parsed


# Register a pull topic (no callback) and one with a callback whose limits a consumer would use.
view = answer(
    put_topic.sync_detailed(
        "py.orders",
        client=client,
        body=TopicConfig(retry=Retry(max_attempts=5, backoff_ms=[1000, 2000])),
    ),
    200,
    TopicView,
)
assert view.topic == "py.orders" and view.config.retry.max_attempts == 5, view
hooked = answer(
    put_topic.sync_detailed(
        "py.hooked",
        client=client,
        body=TopicConfig(
            callback=Callback(url="http://127.0.0.1:9/hook", rate_per_s=5.0, burst=2, concurrency=4),
            paused=True,
        ),
    ),
    200,
    TopicView,
)
assert hooked.config.callback.rate_per_s == 5.0 and hooked.config.callback.burst == 2, hooked
got = answer(get_topic.sync_detailed("py.hooked", client=client), 200, TopicView)
assert got.config.callback.url == "http://127.0.0.1:9/hook", got

# Push one job, and a batch; look one up and reschedule another.
pushed = answer(
    push.sync_detailed(client=client, body=PushRequest(topic="py.orders", body={"order": 42}, id="py-1")),
    201,
    PushAnswer,
)
assert pushed.id == "py-1" and pushed.state == State.READY, pushed
batch = answer(
    push_many.sync_detailed(
        client=client,
        body=BatchRequest(
            jobs=[
                PushRequest(topic="py.orders", body=1, id="py-2", delay_ms=60000),
                PushRequest(topic="py.orders", body=2, id="py-3", delay_ms=60000),
            ]
        ),
    ),
    200,
    BatchAnswer,
)
assert len(batch.results) == 2, batch
job = answer(lookup.sync_detailed("py-1", client=client), 200, Job)
assert job.body == {"order": 42} and job.topic == "py.orders", job
moved = answer(reschedule.sync_detailed("py-2", client=client, body=RescheduleRequest(delay_ms=0)), 200, Job)
assert moved.state == State.READY, moved

# Reserve both ready jobs and ack them.
reserved = answer(
    reserve.sync_detailed(client=client, body=ReserveRequest(topics=["py.orders"], count=10)),
    200,
    Reserved,
)
ids = sorted(r.id for r in reserved.jobs)
assert ids == ["py-1", "py-2"], ids
for r in reserved.jobs:
    assert r.ttr_ms > 0 and r.deadline > 0, r
    resp = ack.sync_detailed(r.id, client=client, body=AckRequest(receipt=r.receipt))
    assert resp.status_code == 204, f"{resp.status_code} {resp.content!r}"
done = answer(lookup.sync_detailed("py-1", client=client), 200, Job)
assert done.state == State.DONE, done

# A schedule.
schedule = answer(
    put_schedule.sync_detailed(
        "py-nightly",
        client=client,
        body=ScheduleConfig(cron="0 3 * * *", timezone="Europe/Berlin", topic="py.orders", body={"run": "nightly"}),
    ),
    200,
    ScheduleView,
)
assert schedule.name == "py-nightly" and schedule.config.cron == "0 3 * * *", schedule
again = answer(get_schedule.sync_detailed("py-nightly", client=client), 200, ScheduleView)
assert again.next_fire_at, again

# Stats and the topic list.
st = answer(stats.sync_detailed(client=client), 200, Stats)
orders = st.topics.additional_properties.get("py.orders")
assert orders is not None, st.topics.additional_properties
listed = answer(list_topics.sync_detailed(client=client), 200, TopicList)
names = sorted(t.topic for t in listed.topics)
assert "py.orders" in names and "py.hooked" in names, names

print("ok")
