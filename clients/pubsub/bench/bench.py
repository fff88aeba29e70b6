#!/usr/bin/env python3
"""Speed of a Pub/Sub v1 server through the official Python client (google-cloud-pubsub).

Runs against whatever PUBSUB_EMULATOR_HOST points at (redq or Google's emulator)
the three rows of scripts/pubsub-bench.sh, each with the client's default batching
and flow control:

  publish   COUNT messages of 100 bytes, every future waited for;
  receive   the COUNT just published (an untimed backlog for this row) read and
            acked with the streaming subscriber, timed from subscribe() to the
            callback that acks the last distinct message;
  latency   RATE msg/s paced for SECONDS s, the publish time (CLOCK_MONOTONIC, which
            every process shares) in an attribute; a second process subscribes and
            takes callback time - publish time.

Prints one JSON object per row on stdout (see `row_record`), progress on stderr.
With --pids label=PID,... each row also gives the CPU time those processes (the
server's) used during the row, read from /proc/PID/stat. Every wait is bounded;
a row that runs out of time is reported incomplete and the program goes on.

Usage: PUBSUB_EMULATOR_HOST=127.0.0.1:50051 bench.py [--count N] [--rate R]
       [--seconds S] [--warmup N] [--pids redq=1,redis-server=2] [--project P]
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
import uuid

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as retries
from google.cloud import pubsub_v1

PAYLOAD = bytes(range(100))  # 100 bytes, the same for every message
RPC_TIMEOUT_S = 10.0  # one admin call
CLOSE_TIMEOUT_S = 10.0  # a subscriber's shutdown (acks flushed)
CLEANUP_S = 15.0  # deleting what the run made
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(text):
    print(f"bench.py: {text}", file=sys.stderr, flush=True)


def rpc_options():
    """Admin calls retry on UNAVAILABLE for no longer than one attempt's bound."""
    retry = retries.Retry(
        predicate=retries.if_exception_type(api_exceptions.ServiceUnavailable),
        initial=0.1,
        maximum=1.0,
        timeout=RPC_TIMEOUT_S,
    )
    return {"retry": retry, "timeout": RPC_TIMEOUT_S}


class Cpu:
    """CPU seconds (user + system) of this process, of the given pids and of the machine."""

    def __init__(self, pids):
        self.pids = pids  # label -> pid

    @staticmethod
    def of_pid(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                # The command name may hold spaces and parentheses: fields count from the last ')'.
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime

    @staticmethod
    def machine_busy():
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        idle = values[3] + values[4]  # idle + iowait
        return (sum(values[:8]) - idle) / CLOCK_TICKS  # guest time is already in user

    def snapshot(self):
        return {
            "wall": time.monotonic(),
            "client": time.process_time(),
            "server": {label: self.of_pid(pid) for label, pid in self.pids.items()},
            "machine": self.machine_busy(),
        }

    @staticmethod
    def spent(before, after):
        server = {}
        for label, start in before["server"].items():
            end = after["server"].get(label)
            server[label] = None if start is None or end is None else round(end - start, 3)
        return {
            "window_s": round(after["wall"] - before["wall"], 3),
            "client_cpu_s": round(after["client"] - before["client"], 3),
            "server_cpu_s": server,
            "machine_busy_s": round(after["machine"] - before["machine"], 3),
        }


def row_record(row, expected, messages, seconds, cpu, **extra):
    record = {
        "lang": "python",
        "row": row,
        "expected": expected,
        "messages": messages,
        "complete": messages >= expected,
        "seconds": round(seconds, 4),
        "rate": round(messages / seconds, 1) if seconds > 0 else None,
    }
    record.update(cpu)
    record.update(extra)
    print(json.dumps(record), flush=True)
    return record


class Resources:
    """The topics and subscriptions of this run, deleted at the end (errors ignored)."""

    def __init__(self, project):
        self.project = project
        self.publisher_admin = pubsub_v1.PublisherClient()
        self.subscriber = pubsub_v1.SubscriberClient()
        self.run = uuid.uuid4().hex[:8]
        self.topics = []
        self.subscriptions = []

    def topic_with_subscription(self, name):
        topic = self.publisher_admin.topic_path(self.project, f"bench-py-{self.run}-{name}")
        subscription = self.subscriber.subscription_path(self.project, f"bench-py-{self.run}-{name}")
        self.publisher_admin.create_topic(name=topic, **rpc_options())
        self.topics.append(topic)
        self.subscriber.create_subscription(name=subscription, topic=topic, **rpc_options())
        self.subscriptions.append(subscription)
        return topic, subscription

    def delete(self):
        """Within CLEANUP_S in all: a server that stopped answering costs no more."""
        end = time.monotonic() + CLEANUP_S
        calls = [(self.subscriber.delete_subscription, {"subscription": s}) for s in self.subscriptions]
        calls += [(self.publisher_admin.delete_topic, {"topic": t}) for t in self.topics]
        for call, what in calls:
            left = end - time.monotonic()
            if left < 0.5:
                log(f"cleanup: out of time, {what} left")
                continue
            try:
                call(**what, retry=None, timeout=min(RPC_TIMEOUT_S, left))
            except Exception as exc:  # noqa: BLE001 - cleanup is best effort
                log(f"deleting {what}: {exc}")


def publish_all(publisher, topic, count, budget_s):
    """Publishes count messages, waits for every future.

    Returns (published, failed, seconds, phases): phases says when, in seconds from the
    start, the last publish() call returned and the first future resolved."""
    start = time.perf_counter()
    first = []
    futures = []
    for _ in range(count):
        future = publisher.publish(topic, PAYLOAD)
        if not futures:
            future.add_done_callback(lambda _: first.append(time.perf_counter()))
        futures.append(future)
    calls_done = time.perf_counter()
    done, not_done = concurrent.futures.wait(futures, timeout=max(0.1, budget_s - (calls_done - start)))
    seconds = time.perf_counter() - start
    failed = sum(1 for f in done if f.exception() is not None)
    phases = {
        "calls_s": round(calls_done - start, 4),
        "first_confirm_s": round(first[0] - start, 4) if first else None,
    }
    return len(done) - failed, failed + len(not_done), seconds, phases


def receive_all(subscriber, subscription, count, budget_s):
    """Streams the subscription until count distinct messages were acked, or budget_s.

    Returns (distinct, deliveries, seconds to the last distinct ack, seconds to the first
    delivery); the subscriber is closed (acks flushed) before it returns, within a bound."""
    lock = threading.Lock()
    seen = set()
    deliveries = 0
    times = {}
    all_in = threading.Event()

    def callback(message):
        nonlocal deliveries
        message.ack()
        with lock:
            deliveries += 1
            if "first" not in times:
                times["first"] = time.perf_counter()
            if message.message_id not in seen:
                seen.add(message.message_id)
                times["last"] = time.perf_counter()
                if len(seen) >= count:
                    all_in.set()

    start = time.perf_counter()
    future = subscriber.subscribe(subscription, callback=callback)
    all_in.wait(budget_s)
    close(future)
    with lock:
        last = times.get("last", time.perf_counter()) - start
        first = times.get("first", start) - start
        return len(seen), deliveries, last, first


def close(streaming_pull_future):
    streaming_pull_future.cancel()
    try:
        streaming_pull_future.result(timeout=CLOSE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - a cancelled future may raise; a hung one times out
        if not isinstance(exc, concurrent.futures.CancelledError):
            log(f"closing the subscriber: {type(exc).__name__}: {exc}")


def percentile(sorted_values, fraction):
    """Nearest rank."""
    if not sorted_values:
        return None
    rank = max(1, int(-(-fraction * len(sorted_values) // 1)))  # ceil
    return sorted_values[rank - 1]


def latency_subscriber(args):
    """The second process of the latency row: prints "warm" on the first warm-up message,
    then one JSON line of latencies once it has --expect timed messages, or its stdin
    closed and --grace s passed, or --budget s passed."""
    subscriber = pubsub_v1.SubscriberClient()
    lock = threading.Lock()
    latencies = []
    seen = set()
    state = {"warm": False, "deliveries": 0}
    finished = threading.Event()
    cpu_at_warm = {}

    def callback(message):
        now = time.monotonic_ns()
        message.ack()
        attributes = message.attributes
        with lock:
            if attributes.get("warmup") == "1":
                if not state["warm"]:
                    state["warm"] = True
                    cpu_at_warm["cpu"] = time.process_time()
                    print("warm", flush=True)
                return
            state["deliveries"] += 1
            seq = attributes.get("seq")
            if seq in seen:
                return
            seen.add(seq)
            latencies.append((now - int(attributes["t"])) / 1e6)
            if len(seen) >= args.expect:
                finished.set()

    future = subscriber.subscribe(args.subscription, callback=callback)

    def wait_for_stdin_end():
        sys.stdin.read()
        finished.wait(args.grace)
        finished.set()

    threading.Thread(target=wait_for_stdin_end, daemon=True).start()
    finished.wait(args.budget)
    cpu = time.process_time() - cpu_at_warm.get("cpu", 0.0)
    close(future)
    with lock:
        values = sorted(latencies)
        result = {
            "received": len(seen),
            "deliveries": state["deliveries"],
            "p50_ms": percentile(values, 0.50),
            "p99_ms": percentile(values, 0.99),
            "max_ms": values[-1] if values else None,
            "mean_ms": sum(values) / len(values) if values else None,
            "cpu_s": cpu,
        }
    print(json.dumps(result), flush=True)
    os._exit(0)


def latency_row(args, resources, cpu_meter):
    topic, subscription = resources.topic_with_subscription("latency")
    expect = int(args.rate * args.seconds)
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "latency-subscriber",
         "--subscription", subscription, "--expect", str(expect),
         "--grace", "10", "--budget", str(args.seconds + 60)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True)
    reader.start()
    publisher = pubsub_v1.PublisherClient()
    try:
        # Warm-up messages every 20 ms until the subscriber has one: its stream is open.
        warm_deadline = time.monotonic() + 20
        while "warm\n" not in lines and time.monotonic() < warm_deadline and child.poll() is None:
            publisher.publish(topic, PAYLOAD, warmup="1", t=str(time.monotonic_ns()))
            time.sleep(0.02)
        if "warm\n" not in lines:
            log("latency: the subscriber received no warm-up message within 20 s")
            return row_record("latency", expect, 0, 0.0, cpu_meter.spent(cpu_meter.snapshot(), cpu_meter.snapshot()))
        before = cpu_meter.snapshot()
        futures = []
        confirms = []  # publish call -> its future resolved, ms: the publisher's share
        start = time.monotonic()
        for seq in range(expect):
            delay = start + seq / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent = time.monotonic_ns()
            future = publisher.publish(topic, PAYLOAD, seq=str(seq), t=str(sent))
            future.add_done_callback(lambda _, sent=sent: confirms.append((time.monotonic_ns() - sent) / 1e6))
            futures.append(future)
        publish_seconds = time.monotonic() - start
        _, not_done = concurrent.futures.wait(futures, timeout=30)
        confirmed = sorted(confirms)
        child.stdin.close()  # the subscriber gives the stragglers --grace s more
        reader.join(timeout=args.seconds + 90)
        after = cpu_meter.snapshot()
        results = [json.loads(line) for line in lines if line.startswith("{")]
        if not results:
            log("latency: the subscriber printed no result")
            return row_record("latency", expect, 0, publish_seconds, cpu_meter.spent(before, after))
        result = results[0]
        spent = cpu_meter.spent(before, after)
        spent["client_cpu_s"] = round(spent["client_cpu_s"] + result["cpu_s"], 3)
        return row_record(
            "latency", expect, result["received"], publish_seconds, spent,
            p50_ms=result["p50_ms"], p99_ms=result["p99_ms"], max_ms=result["max_ms"],
            mean_ms=result["mean_ms"], duplicates=result["deliveries"] - result["received"],
            confirm_p50_ms=percentile(confirmed, 0.50), confirm_p99_ms=percentile(confirmed, 0.99),
            publish_failed=len(not_done), publisher_cpu_s=round(spent["client_cpu_s"] - result["cpu_s"], 3),
            subscriber_cpu_s=round(result["cpu_s"], 3),
        )
    finally:
        if child.poll() is None:
            try:
                child.stdin.close()
            except OSError:
                pass
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    child = sub.add_parser("latency-subscriber")
    child.add_argument("--subscription", required=True)
    child.add_argument("--expect", type=int, required=True)
    child.add_argument("--grace", type=float, default=10.0)
    child.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo"))
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--rate", type=float, default=1_000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rows", default="publish,receive,latency")
    parser.add_argument("--pids", default="", help="label=pid,... of the server's processes")
    args = parser.parse_args()
    if args.mode == "latency-subscriber":
        latency_subscriber(args)
        return
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        log("set PUBSUB_EMULATOR_HOST=host:port")
        sys.exit(2)
    pids = {}
    for item in filter(None, args.pids.split(",")):
        label, _, pid = item.partition("=")
        pids[label] = int(pid)
    rows = set(args.rows.split(","))
    cpu_meter = Cpu(pids)
    # Rows run for at most this long each: 500 msg/s at least, a minute at least.
    budget_s = max(60.0, args.count / 500)
    resources = Resources(args.project)
    try:
        if args.warmup:
            # The same work, small and untimed: JIT, connections and caches warm on both sides.
            topic, subscription = resources.topic_with_subscription("warmup")
            publish_all(resources.publisher_admin, topic, args.warmup, 30)
            got, _, _, _ = receive_all(resources.subscriber, subscription, args.warmup, 30)
            log(f"warm-up: {got} of {args.warmup} received")
        if rows & {"publish", "receive"}:
            topic, subscription = resources.topic_with_subscription("throughput")
            # A client of its own: the warm-up's batches and threads are not in its way.
            publisher = pubsub_v1.PublisherClient()
            before = cpu_meter.snapshot()
            published, failed, seconds, phases = publish_all(publisher, topic, args.count, budget_s)
            row_record("publish", args.count, published, seconds, cpu_meter.spent(before, cpu_meter.snapshot()),
                       failed=failed, **phases)
            log(f"publish: {published} in {seconds:.2f} s")
            if "receive" in rows:
                subscriber = pubsub_v1.SubscriberClient()
                before = cpu_meter.snapshot()
                distinct, deliveries, seconds, first = receive_all(subscriber, subscription, published, budget_s)
                row_record("receive", published, distinct, seconds, cpu_meter.spent(before, cpu_meter.snapshot()),
                           duplicates=deliveries - distinct, first_delivery_s=round(first, 4))
                log(f"receive: {distinct} in {seconds:.2f} s")
        if "latency" in rows:
            record = latency_row(args, resources, cpu_meter)
            log(f"latency: {record['messages']} received, p50 {record.get('p50_ms')} ms, p99 {record.get('p99_ms')} ms")
    finally:
        resources.delete()
    sys.stdout.flush()
    # The client's non-daemon threads (batch commits, a stuck stream) must not hold the exit.
    os._exit(0)


if __name__ == "__main__":
    main()
