#!/usr/bin/env python3
"""Drive a Pub/Sub v1 server with the official Python client and print what it saw.

Runs against whatever PUBSUB_EMULATOR_HOST points at (redq or Google's emulator):
creates a topic and three subscriptions (plain, message ordering, retain acked
messages), checks the error statuses of a few bad calls, publishes 50 messages
with batching and ordering keys, receives them on the streaming subscriber with
flow control (one message is nacked once and must come back unchanged), seeks
the retaining subscription back in time and receives everything again, then
deletes what it made.

Prints ONE JSON object on stdout holding only what any correct Pub/Sub server
must make identical (status code names, counts, attributes; no ids, times or
timing), so scripts/pubsub-differential.sh can diff two servers. Exits 1 when a
check fails (the reasons go to stderr), 2 on bad usage; every wait is bounded
and the whole run is cut at RUN_BUDGET_S.

Usage: PUBSUB_EMULATOR_HOST=127.0.0.1:50051 python3 example.py [PROJECT_ID]
(the project defaults to $GOOGLE_CLOUD_PROJECT, else "demo").
"""

import datetime
import importlib.metadata
import json
import os
import sys
import threading
import time
import uuid

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as retries
from google.cloud import pubsub_v1

RUN_BUDGET_S = 50.0  # the whole run, cleanup included, stays under this
RPC_TIMEOUT_S = 10.0  # one admin call
PHASE_TIMEOUT_S = 15.0  # one receiving phase
SETTLE_S = 0.5  # after a phase has all it waited for: time for stray extra deliveries
QUIET_S = 0.5  # no delivery for this long: hold no longer for MAX_OUTSTANDING messages

MESSAGES = 50
ORDERING_KEYS = ("alpha", "beta")  # five messages each, published in between the others
KEYED_PER_KEY = 5
NACKED_INDEX = 8  # a message without ordering key
MAX_OUTSTANDING = 10
PULL_MAX_MESSAGES = 10


class Budget:
    """One deadline for the whole run; every wait takes min(its own cap, what is left)."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self, cap):
        return max(0.1, min(cap, self.end - time.monotonic()))

    def rpc(self, cap=RPC_TIMEOUT_S):
        """Per-call options: the client's default retries run for up to a minute or
        more (Publish: ten), so each call gets a retry (on UNAVAILABLE, as the defaults
        of the admin calls) bounded by the same time as its attempt."""
        seconds = self.left(cap)
        retry = retries.Retry(
            predicate=retries.if_exception_type(api_exceptions.ServiceUnavailable),
            initial=0.1,
            maximum=1.0,
            multiplier=1.3,
            timeout=seconds,
        )
        return {"retry": retry, "timeout": seconds}


def code_name(exc):
    """The gRPC status code name of a client exception (what both servers must agree on)."""
    if isinstance(exc, api_exceptions.GoogleAPICallError) and exc.grpc_status_code is not None:
        return exc.grpc_status_code.name
    if isinstance(exc, api_exceptions.RetryError):
        return "DEADLINE_EXCEEDED"
    if isinstance(exc, TimeoutError) or type(exc).__name__ == "TimeoutError":
        return "DEADLINE_EXCEEDED"
    return type(exc).__name__


def expect_error(call):
    """Run a call that must fail; return its status code name, or "OK" if it did not fail."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the code name is the result
        return code_name(exc)
    return "OK"


def message_plan(lang):
    """The 50 messages: (data, attributes, ordering_key), ten of them on two ordering keys."""
    keyed = {}  # index -> key: keys alternate every few messages so they interleave with the rest
    for n in range(KEYED_PER_KEY * len(ORDERING_KEYS)):
        keyed[3 + 4 * n] = ORDERING_KEYS[n % len(ORDERING_KEYS)]
    plan = []
    seq = {key: 0 for key in ORDERING_KEYS}
    for index in range(MESSAGES):
        key = keyed.get(index, "")
        attributes = {"index": str(index), "lang": lang, "kind": "keyed" if key else "plain"}
        if key:
            attributes["seq"] = str(seq[key])
            seq[key] += 1
        plan.append((f"message {index}".encode(), attributes, key))
    return plan


class Collector:
    """Messages delivered to the callback, held until the main thread settles them."""

    def __init__(self):
        self.cond = threading.Condition()
        self.held = []  # delivered, neither acked nor nacked yet
        self.deliveries = []  # (index, data, attributes, ordering_key) of every delivery

    def callback(self, message):
        with self.cond:
            self.held.append(message)
            self.deliveries.append(
                (
                    message.attributes.get("index"),
                    message.data,
                    dict(message.attributes),
                    message.ordering_key,
                )
            )
            self.cond.notify_all()

    def distinct(self):
        return len({d[0] for d in self.deliveries})


def receive(subscriber, path, budget, settle, done, hold_until_full=False):
    """Stream-pull `path` until done(collector) holds, settling each message with settle(msg, first).

    With hold_until_full, messages are held until MAX_OUTSTANDING are outstanding (or
    none arrived for a moment) so the client's flow control is what stops delivery.
    Returns (collector, max outstanding seen, error code name or None).
    """
    collector = Collector()
    flow = pubsub_v1.types.FlowControl(max_messages=MAX_OUTSTANDING)
    future = subscriber.subscribe(path, callback=collector.callback, flow_control=flow)
    seen = {}
    max_outstanding = 0
    error = None
    deadline = time.monotonic() + budget.left(PHASE_TIMEOUT_S)
    finished_at = None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                error = "DEADLINE_EXCEEDED"
                break
            if future.done():
                exc = future.exception(timeout=0)
                error = code_name(exc) if exc else "STREAM_ENDED"
                break
            with collector.cond:
                if finished_at is None and done(collector):
                    finished_at = now
                if finished_at is not None and now - finished_at >= SETTLE_S:
                    break
                if not collector.held or (hold_until_full and len(collector.held) < MAX_OUTSTANDING):
                    # Wait for more; a short quiet moment counts as "no more coming right now".
                    arrived = collector.cond.wait(timeout=QUIET_S)
                    if arrived or not collector.held:
                        continue
                batch, collector.held = collector.held, []
                max_outstanding = max(max_outstanding, len(batch))
            for message in batch:
                index = message.attributes.get("index")
                first = index not in seen
                seen[index] = seen.get(index, 0) + 1
                settle(message, first)
    finally:
        future.cancel()
        try:
            future.result(timeout=budget.left(5.0))
        except Exception:  # noqa: BLE001 - the stream was cancelled on purpose
            pass
    return collector, max_outstanding, error


def pull_and_ack(subscriber, path, budget, want):
    """Unary Pull (max PULL_MAX_MESSAGES) and Acknowledge until `want` distinct messages came.

    Returns (the distinct indexes, the largest response seen, error code name or None).
    """
    indexes = set()
    largest = 0
    deadline = time.monotonic() + budget.left(PHASE_TIMEOUT_S)
    while len(indexes) < want:
        if time.monotonic() >= deadline:
            return indexes, largest, "DEADLINE_EXCEEDED"
        try:
            response = subscriber.pull(
                request={"subscription": path, "max_messages": PULL_MAX_MESSAGES},
                **budget.rpc(max(0.5, min(5.0, deadline - time.monotonic()))),
            )
        except api_exceptions.DeadlineExceeded:
            continue  # an empty long poll
        except Exception as exc:  # noqa: BLE001 - reported
            return indexes, largest, code_name(exc)
        largest = max(largest, len(response.received_messages))
        if response.received_messages:
            for received in response.received_messages:
                indexes.add(received.message.attributes.get("index"))
            subscriber.acknowledge(
                request={"subscription": path, "ack_ids": [r.ack_id for r in response.received_messages]},
                **budget.rpc(),
            )
    return indexes, largest, None


def main():
    if len(sys.argv) > 2 or not os.environ.get("PUBSUB_EMULATOR_HOST"):
        print("usage: PUBSUB_EMULATOR_HOST=host:port example.py [PROJECT_ID]", file=sys.stderr)
        return 2
    project = sys.argv[1] if len(sys.argv) == 2 else os.environ.get("GOOGLE_CLOUD_PROJECT", "demo")
    budget = Budget(RUN_BUDGET_S)
    watchdog = threading.Timer(RUN_BUDGET_S + 8, lambda: (print("FAIL: run budget exceeded", file=sys.stderr), os._exit(1)))
    watchdog.daemon = True
    watchdog.start()

    run = uuid.uuid4().hex[:12]
    publisher = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=10, max_bytes=64 * 1024, max_latency=0.05),
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
    )
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(project, f"redq-example-py-{run}")
    missing_topic = publisher.topic_path(project, f"redq-example-py-{run}-missing")
    subs = {
        "main": subscriber.subscription_path(project, f"redq-example-py-{run}-main"),
        "ordered": subscriber.subscription_path(project, f"redq-example-py-{run}-ordered"),
        "retain": subscriber.subscription_path(project, f"redq-example-py-{run}-retain"),
    }
    missing_sub = subscriber.subscription_path(project, f"redq-example-py-{run}-missing")

    result = {"client": "python google-cloud-pubsub " + importlib.metadata.version("google-cloud-pubsub")}
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    created_topic = False
    created_subs = []
    phase = "setup"
    try:
        phase = "create"
        publisher.create_topic(name=topic, **budget.rpc())
        created_topic = True
        settings = {
            "main": {},
            "ordered": {"enable_message_ordering": True},
            "retain": {"retain_acked_messages": True},
        }
        for role, path in subs.items():
            subscriber.create_subscription(
                request={"name": path, "topic": topic, **settings[role]}, **budget.rpc()
            )
            created_subs.append(path)

        phase = "errors"
        errors = {
            "create_existing_topic": expect_error(
                lambda: publisher.create_topic(name=topic, **budget.rpc())
            ),
            "create_existing_subscription": expect_error(
                lambda: subscriber.create_subscription(
                    request={"name": subs["main"], "topic": topic}, **budget.rpc()
                )
            ),
            "create_subscription_on_missing_topic": expect_error(
                lambda: subscriber.create_subscription(
                    request={"name": missing_sub, "topic": missing_topic}, **budget.rpc()
                )
            ),
            "get_missing_topic": expect_error(
                lambda: publisher.get_topic(topic=missing_topic, **budget.rpc())
            ),
            "get_missing_subscription": expect_error(
                lambda: subscriber.get_subscription(subscription=missing_sub, **budget.rpc())
            ),
            "publish_to_missing_topic": expect_error(
                lambda: publisher.publish(missing_topic, b"nobody", **budget.rpc()).result(
                    timeout=budget.left(RPC_TIMEOUT_S)
                )
            ),
        }
        result["errors"] = errors
        for case, code in errors.items():
            want = "ALREADY_EXISTS" if case.startswith("create_existing") else "NOT_FOUND"
            check(code == want, f"{case}: got {code}, want {want}")

        phase = "describe"
        described = {}
        for role, path in subs.items():
            got = subscriber.get_subscription(subscription=path, **budget.rpc())
            described[role] = {
                "topic_matches": got.topic == topic,
                "ack_deadline_seconds": got.ack_deadline_seconds,
                "enable_message_ordering": got.enable_message_ordering,
                "retain_acked_messages": got.retain_acked_messages,
            }
        result["subscriptions"] = described
        check(all(d["topic_matches"] for d in described.values()), "a subscription names another topic")
        check(described["main"]["ack_deadline_seconds"] == 10, "default ack deadline is not 10 s")
        check(described["ordered"]["enable_message_ordering"], "ordering subscription lost enable_message_ordering")
        check(described["retain"]["retain_acked_messages"], "retain subscription lost retain_acked_messages")
        listed = sorted(
            subscriber_path.rsplit("/", 1)[-1].rsplit("-", 1)[-1]
            for subscriber_path in publisher.list_topic_subscriptions(
                topic=topic, **budget.rpc()
            )
        )
        result["topic_subscriptions"] = listed
        check(listed == ["main", "ordered", "retain"], f"topic lists subscriptions {listed}")

        phase = "publish"
        plan = message_plan("python")
        before_publish = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
        futures = [
            publisher.publish(topic, data, ordering_key=key, **budget.rpc(), **attributes)
            for data, attributes, key in plan
        ]
        ids = [f.result(timeout=budget.left(RPC_TIMEOUT_S)) for f in futures]
        result["published"] = {
            "messages": len(ids),
            "distinct_message_ids": len(set(ids)),
            "with_ordering_key": sum(1 for _, _, key in plan if key),
        }
        check(len(set(ids)) == MESSAGES, "publish returned repeated message ids")
        by_index = {attributes["index"]: (data, attributes, key) for data, attributes, key in plan}

        phase = "receive"
        nacked = str(NACKED_INDEX)

        def settle_main(message, first):
            if message.attributes.get("index") == nacked and first:
                message.nack()
            else:
                message.ack()

        def main_done(c):
            return c.distinct() == MESSAGES and sum(1 for d in c.deliveries if d[0] == nacked) >= 2

        collector, max_outstanding, error = receive(
            subscriber, subs["main"], budget, settle_main, main_done, hold_until_full=True
        )
        nacked_deliveries = [d for d in collector.deliveries if d[0] == nacked]
        want_data, want_attributes, want_key = by_index[nacked]
        identical = len(nacked_deliveries) >= 2 and all(
            d[1] == want_data and d[2] == want_attributes and d[3] == want_key for d in nacked_deliveries
        )
        counts = {}
        for d in collector.deliveries:
            counts[d[0]] = counts.get(d[0], 0) + 1
        result["receive"] = {
            "error": error,
            "distinct_messages": collector.distinct(),
            "deliveries": len(collector.deliveries),
            "nacked_redeliveries": len(nacked_deliveries) - 1 if nacked_deliveries else 0,
            "redelivery_identical": identical,
            "duplicates_of_acked": sum(n - 1 for index, n in counts.items() if index != nacked),
            "max_outstanding": max_outstanding,
            "nacked_message": {
                "data": want_data.decode() if nacked_deliveries else None,
                "attributes": dict(sorted(nacked_deliveries[0][2].items())) if nacked_deliveries else None,
                "ordering_key": nacked_deliveries[0][3] if nacked_deliveries else None,
            },
            "ordering_key_of_message_3": next((d[3] for d in collector.deliveries if d[0] == "3"), None),
            "ordering_keys_as_published": all(d[0] in by_index and by_index[d[0]][2] == d[3] for d in collector.deliveries),
            "unknown_payloads": sum(
                1 for d in collector.deliveries if d[0] not in by_index or by_index[d[0]][0] != d[1]
            ),
        }
        check(error is None, f"receive: {error}")
        check(collector.distinct() == MESSAGES, f"receive: {collector.distinct()} of {MESSAGES} messages")
        check(len(nacked_deliveries) == 2, f"nacked message delivered {len(nacked_deliveries)} times, want 2")
        check(identical, "the redelivered message differs from the first delivery")
        check(0 < max_outstanding <= MAX_OUTSTANDING, f"{max_outstanding} messages outstanding at once")
        check(result["receive"]["ordering_keys_as_published"], "a message came with another ordering key")
        check(result["receive"]["unknown_payloads"] == 0, "a message's data does not match its index")

        phase = "ordered"
        collector, _, error = receive(
            subscriber,
            subs["ordered"],
            budget,
            lambda message, first: message.ack(),
            lambda c: c.distinct() == MESSAGES,
        )
        seqs = {key: [] for key in ORDERING_KEYS}
        seen = set()
        for index, _data, attributes, key in collector.deliveries:
            if key and index not in seen:
                seqs.setdefault(key, []).append(int(attributes["seq"]))
            seen.add(index)
        in_order = all(s == list(range(KEYED_PER_KEY)) for s in seqs.values())
        result["ordered"] = {
            "error": error,
            "distinct_messages": collector.distinct(),
            "per_key": {key: len(s) for key, s in sorted(seqs.items())},
            "in_publish_order": in_order,
        }
        check(error is None, f"ordered: {error}")
        check(collector.distinct() == MESSAGES, f"ordered: {collector.distinct()} of {MESSAGES} messages")
        check(in_order, f"ordering keys out of publish order: {seqs}")

        phase = "seek"
        # Read the retaining subscription once with unary Pull + Acknowledge (Google's
        # emulator never closes a StreamingPull that the client cancelled, so a second
        # stream on the same subscription would get nothing there), seek back to before
        # the publishes, then stream everything again.
        pulled, max_pulled, pull_error = pull_and_ack(subscriber, subs["retain"], budget, MESSAGES)
        subscriber.seek(
            request={"subscription": subs["retain"], "time": before_publish}, **budget.rpc()
        )
        again, _, error = receive(
            subscriber, subs["retain"], budget, lambda message, first: message.ack(), lambda c: c.distinct() == MESSAGES
        )
        result["seek"] = {
            "pull_error": pull_error,
            "pulled_before_seek": len(pulled),
            "pull_response_within_max_messages": max_pulled <= PULL_MAX_MESSAGES,
            "error": error,
            "received_after_seek_to_before_publish": again.distinct(),
        }
        check(pull_error is None, f"pull: {pull_error}")
        check(len(pulled) == MESSAGES, f"retain: pulled {len(pulled)} of {MESSAGES} before the seek")
        check(max_pulled <= PULL_MAX_MESSAGES, f"a Pull response held {max_pulled} > {PULL_MAX_MESSAGES} messages")
        check(error is None, f"after seek: {error}")
        check(again.distinct() == MESSAGES, f"retain: {again.distinct()} of {MESSAGES} after the seek")

        phase = "delete"
        for path in list(created_subs):
            subscriber.delete_subscription(subscription=path, **budget.rpc())
            created_subs.remove(path)
        publisher.delete_topic(topic=topic, **budget.rpc())
        created_topic = False
        deleted = {
            "get_deleted_topic": expect_error(
                lambda: publisher.get_topic(topic=topic, **budget.rpc())
            ),
            "get_deleted_subscription": expect_error(
                lambda: subscriber.get_subscription(subscription=subs["main"], **budget.rpc())
            ),
        }
        result["deleted"] = deleted
        for case, code in deleted.items():
            check(code == "NOT_FOUND", f"{case}: got {code}, want NOT_FOUND")
    except Exception as exc:  # noqa: BLE001 - reported as a failure of the phase
        result["fatal"] = {"phase": phase, "code": code_name(exc)}
        failures.append(f"{phase}: {code_name(exc)}: {exc}")
    finally:
        for path in created_subs:
            try:
                subscriber.delete_subscription(subscription=path, **budget.rpc(3.0))
            except Exception:  # noqa: BLE001 - best-effort cleanup
                pass
        if created_topic:
            try:
                publisher.delete_topic(topic=topic, **budget.rpc(3.0))
            except Exception:  # noqa: BLE001 - best-effort cleanup
                pass

    print(json.dumps(result, indent=2))
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    # The client's background threads can hold the interpreter open; the result is out.
    os._exit(1 if failures else 0)


if __name__ == "__main__":
    main()
