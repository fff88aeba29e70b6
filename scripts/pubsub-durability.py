#!/usr/bin/env python3
"""The official Python Pub/Sub client's side of scripts/pubsub-durability.sh.

Four commands, each against PUBSUB_EMULATOR_HOST, project $GOOGLE_CLOUD_PROJECT:

  setup TOPIC SUBSCRIPTION
      Creates the topic and a subscription on it (ack deadline 10 s).
  publish TOPIC SECONDS RATE LOG
      Publishes seq 1, 2, … (attribute `seq`) at RATE a second for SECONDS, then
      waits (bounded) for every publish future. LOG gets one line per future as it
      settles, "ok SEQ SUBMITTED SETTLED MESSAGE_ID" or "fail SEQ SUBMITTED SETTLED
      ERROR", then "done OK FAILED". Times are Unix seconds.
  subscribe SUBSCRIPTION PUBLISH_LOG LOG SETTLE_S RATE
      Streaming pull; each delivery is written to LOG ("SEQ RECEIVED MESSAGE_ID")
      before it is acked. Takes at most RATE messages a second until the publisher
      is done (a backlog waits in Redis meanwhile), then all it gets. Stops once
      PUBLISH_LOG says "done" and every seq it says "ok" for has been received
      (after a short linger for duplicates), or SETTLE_S seconds after "done".
  verdict MODE PUBLISH_LOG RECEIVE_LOG EVENTS_LOG
      Prints "MODE: published N (ok), failed N, received N distinct, lost N,
      duplicated N (…)" and, on loss, each lost seq beside the events (kills and
      restarts, "TIME WHAT" lines) around it. Exit 0 iff nothing was lost and the
      publisher finished.

Every wait is bounded; each process also has a watchdog that exits it (status 3)
if it outlives its budget, so a hung client cannot block CI.
"""

import os
import signal
import sys
import threading
import time

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as retries
from google.cloud import pubsub_v1

RPC_TIMEOUT_S = 10.0  # one attempt of any call
ADMIN_RETRY_S = 30.0  # setup calls, all attempts
PUBLISH_RETRY_S = 30.0  # one publish future, all the client's attempts
PUBLISH_DRAIN_S = 45.0  # after the last publish: waiting for the futures
LINGER_S = 2.0  # after everything arrived: time for stray duplicates
SUBSCRIBE_BUDGET_S = 150.0  # the subscriber's whole life, a last resort

# What the client retries by default on Publish, minus its 600 s deadline and
# 60 s backoff cap: a replica restart takes about a second here.
RETRYABLE = retries.if_exception_type(
    api_exceptions.Aborted,
    api_exceptions.Cancelled,
    api_exceptions.DeadlineExceeded,
    api_exceptions.InternalServerError,
    api_exceptions.ResourceExhausted,
    api_exceptions.ServiceUnavailable,
    api_exceptions.Unknown,
)


def retry(seconds):
    return retries.Retry(predicate=RETRYABLE, initial=0.1, maximum=1.0, multiplier=1.5, timeout=seconds)


def watchdog(seconds, what):
    def expire():
        print(f"pubsub-durability: {what} outlived its {seconds:.0f} s budget", file=sys.stderr, flush=True)
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def error_name(exc):
    if isinstance(exc, api_exceptions.GoogleAPICallError) and exc.grpc_status_code is not None:
        return exc.grpc_status_code.name
    return type(exc).__name__


def project():
    return os.environ.get("GOOGLE_CLOUD_PROJECT", "demo")


def setup(topic_id, subscription_id):
    watchdog(ADMIN_RETRY_S * 2 + 10, "setup")
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(project(), topic_id)
    subscription = subscriber.subscription_path(project(), subscription_id)
    publisher.create_topic(name=topic, retry=retry(ADMIN_RETRY_S), timeout=RPC_TIMEOUT_S)
    subscriber.create_subscription(
        request={"name": subscription, "topic": topic, "ack_deadline_seconds": 10},
        retry=retry(ADMIN_RETRY_S),
        timeout=RPC_TIMEOUT_S,
    )
    print(f"pubsub-durability: created {topic} and {subscription}", file=sys.stderr)
    return 0


class Log:
    """A line-per-event file written from client threads, flushed per line so that
    what a killed process saw is still there."""

    def __init__(self, path):
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, line):
        with self.lock:
            self.file.write(line + "\n")


def publish(topic_id, seconds, rate, log_path):
    seconds, rate = float(seconds), float(rate)
    watchdog(seconds + PUBLISH_DRAIN_S + 15, "publish")
    publisher = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=20, max_latency=0.01),
    )
    topic = publisher.topic_path(project(), topic_id)
    log = Log(log_path)
    counts = {"ok": 0, "fail": 0}
    settled = threading.Condition()
    futures = 0

    def on_done(seq, submitted):
        def callback(future):
            now = time.time()
            try:
                message_id = future.result()
            except Exception as exc:  # noqa: BLE001 - counted and logged
                outcome, line = "fail", f"fail {seq} {submitted:.3f} {now:.3f} {error_name(exc)}"
            else:
                outcome, line = "ok", f"ok {seq} {submitted:.3f} {now:.3f} {message_id}"
            log.write(line)
            with settled:
                counts[outcome] += 1
                settled.notify_all()

        return callback

    start = time.monotonic()
    seq = 0
    while True:
        due = start + seq / rate  # a fixed schedule: a slow moment is caught up, not skipped
        now = time.monotonic()
        if due - start >= seconds:
            break
        if due > now:
            time.sleep(due - now)
        seq += 1
        submitted = time.time()
        future = publisher.publish(
            topic, f"message {seq}".encode(), retry=retry(PUBLISH_RETRY_S), timeout=RPC_TIMEOUT_S, seq=str(seq)
        )
        futures += 1
        future.add_done_callback(on_done(seq, submitted))
    deadline = time.monotonic() + PUBLISH_DRAIN_S
    with settled:
        while counts["ok"] + counts["fail"] < futures and time.monotonic() < deadline:
            settled.wait(timeout=0.5)
        finished = counts["ok"] + counts["fail"] == futures
        log.write(f"done {counts['ok']} {counts['fail']}" if finished else f"unsettled {futures - counts['ok'] - counts['fail']}")
    print(
        f"pubsub-durability: publisher: {futures} published, {counts['ok']} ok, {counts['fail']} failed"
        + ("" if finished else f", {futures - counts['ok'] - counts['fail']} NOT SETTLED after {PUBLISH_DRAIN_S:.0f} s"),
        file=sys.stderr,
        flush=True,
    )
    os._exit(0 if finished else 1)  # the client's threads may still hold a dead stream


def read_publish_log(path):
    """(ok: seq -> (submitted, settled, message_id), failed: seq -> (…, error), done)."""
    ok, failed, done = {}, {}, None
    try:
        with open(path) as file:
            for line in file:
                parts = line.split()
                if not parts:
                    continue
                if parts[0] in ("ok", "fail") and len(parts) == 5:
                    (ok if parts[0] == "ok" else failed)[int(parts[1])] = (float(parts[2]), float(parts[3]), parts[4])
                elif parts[0] in ("done", "unsettled"):
                    done = parts[0]
    except FileNotFoundError:
        pass
    return ok, failed, done


class Throttle:
    """Holds callbacks to RATE a second until opened, so that a backlog builds up in
    Redis (published, not yet delivered) for the kills to hit."""

    def __init__(self, rate):
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next = time.monotonic()
        self.lock = threading.Lock()
        self.opened = threading.Event()

    def wait(self):
        if self.opened.is_set() or not self.interval:
            return
        with self.lock:
            now = time.monotonic()
            turn = max(self.next, now)
            self.next = turn + self.interval
        self.opened.wait(turn - now)


def subscribe(subscription_id, publish_log, log_path, settle_s, rate):
    settle_s = float(settle_s)
    watchdog(SUBSCRIBE_BUDGET_S, "subscribe")
    subscriber = pubsub_v1.SubscriberClient()
    subscription = subscriber.subscription_path(project(), subscription_id)
    log = Log(log_path)
    received = set()
    lock = threading.Lock()
    throttle = Throttle(float(rate))

    def callback(message):
        throttle.wait()
        seq = message.attributes.get("seq", "?")
        log.write(f"{seq} {time.time():.3f} {message.message_id}")  # before the ack: at least once
        with lock:
            if seq.isdigit():
                received.add(int(seq))
        message.ack()

    # max_duration_per_lease_extension sets the stream's ack deadline (else 60 s):
    # what a killed replica had sent on a stream then comes back after 10 s.
    # max_messages keeps most of the backlog in Redis rather than in this process.
    flow = pubsub_v1.types.FlowControl(max_messages=100, max_duration_per_lease_extension=10)
    future = subscriber.subscribe(subscription, callback=callback, flow_control=flow)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    done_at = None
    complete_at = None
    outcome = "stopped"
    while not stop.wait(0.25):
        if future.done():
            # The client gives up on a stream for good on some errors (NOT_FOUND: the
            # subscription is gone); an application would subscribe again.
            print(f"pubsub-durability: subscriber: stream ended ({future.exception()!r}), subscribing again",
                  file=sys.stderr, flush=True)
            time.sleep(1.0)
            future = subscriber.subscribe(subscription, callback=callback, flow_control=flow)
        ok, _, done = read_publish_log(publish_log)
        if done is None:
            continue
        throttle.opened.set()
        now = time.monotonic()
        done_at = done_at or now
        with lock:
            complete = ok.keys() <= received
        if complete:
            complete_at = complete_at or now
            if now - complete_at >= LINGER_S:
                outcome = "everything received"
                break
        elif now - done_at >= settle_s:
            outcome = f"gave up {settle_s:.0f} s after the publisher finished"
            break
    future.cancel()
    try:
        future.result(timeout=5)
    except Exception:  # noqa: BLE001 - cancelled on purpose
        pass
    with lock:
        print(f"pubsub-durability: subscriber: {len(received)} distinct seqs, {outcome}", file=sys.stderr, flush=True)
    os._exit(0)


def ranges(seqs):
    """'3, 7-9, 12' for [3, 7, 8, 9, 12] (sorted)."""
    spans = []
    for seq in seqs:
        if spans and spans[-1][1] == seq - 1:
            spans[-1][1] = seq
        else:
            spans.append([seq, seq])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def verdict(mode, publish_log, receive_log, events_log):
    ok, failed, done = read_publish_log(publish_log)
    deliveries = {}  # seq -> [(received, message_id)]
    unknown = 0
    try:
        with open(receive_log) as file:
            for line in file:
                parts = line.split()
                if len(parts) != 3 or not parts[0].isdigit():
                    unknown += bool(parts)
                    continue
                deliveries.setdefault(int(parts[0]), []).append((float(parts[1]), parts[2]))
    except FileNotFoundError:
        pass
    events = []
    try:
        with open(events_log) as file:
            for line in file:
                when, _, what = line.strip().partition(" ")
                events.append((float(when), what))
    except FileNotFoundError:
        pass
    # Times are given from the clients' start.
    start = next((t for t, what in events if "started" in what), events[0][0] if events else 0.0)

    lost = sorted(ok.keys() - deliveries.keys())
    duplicated = [seq for seq, got in deliveries.items() if len(got) > 1]
    # A seq with two message ids was stored twice (a publish retried after a reply was
    # lost); with one id, it was delivered again (a lease that ended, an ack lost).
    published_twice = sum(1 for seq in duplicated if len({m for _, m in deliveries[seq]}) > 1)
    received_failed = len(failed.keys() & deliveries.keys())
    unpublished = sorted(deliveries.keys() - ok.keys() - failed.keys())
    print(
        f"{mode}: published {len(ok)} (ok), failed {len(failed)}, received {len(deliveries)} distinct, "
        f"lost {len(lost)}, duplicated {len(duplicated)} "
        f"(redelivered {len(duplicated) - published_twice}, stored twice {published_twice}; "
        f"{sum(len(g) for g in deliveries.values())} deliveries; {received_failed} of the failed received anyway)"
    )
    problems = []
    if done != "done":
        problems.append("the publisher did not finish (its futures did not all settle)" if done else "the publisher wrote no end line")
    if unpublished or unknown:
        problems.append(f"{len(unpublished) + unknown} deliveries of seqs never published: {unpublished[:10]}")
    if lost:
        problems.append(f"{len(lost)} seqs acknowledged to the publisher were never received")
        print(f"{mode}: events (s after start): " + "; ".join(f"{t - start:.1f} {what}" for t, what in events))
        print(f"{mode}:   lost seqs: {ranges(lost)}")
        for seq in lost[:10]:
            submitted, settled_at, message_id = ok[seq]
            before = [what for t, what in events if t <= settled_at]
            print(
                f"{mode}:   lost seq {seq}: submitted {submitted - start:.2f} s, ok at {settled_at - start:.2f} s, "
                f"message_id {message_id}, last event before: {before[-1] if before else '-'}"
            )
        if len(lost) > 10:
            print(f"{mode}:   … and {len(lost) - 10} more")
    for problem in problems:
        print(f"{mode}: FAILED: {problem}")
    return 1 if problems else 0


def main():
    commands = {"setup": (setup, 2), "publish": (publish, 4), "subscribe": (subscribe, 5), "verdict": (verdict, 4)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) - 2 != commands[sys.argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] != "verdict" and not os.environ.get("PUBSUB_EMULATOR_HOST"):
        print("pubsub-durability: set PUBSUB_EMULATOR_HOST", file=sys.stderr)
        return 2
    function, _ = commands[sys.argv[1]]
    return function(*sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
