#!/usr/bin/env python3
"""Example redq client in Python, on the redq library of this folder (redq/).

    python client.py                       # the demo: every step, checked
    python client.py publish TOPIC PAYLOAD [PAYLOAD...] [--attr KEY=VALUE]

It runs straight from the repository: when the redq package is not installed,
it imports the one beside this file (its gRPC stubs are committed; it needs
grpcio, protobuf and googleapis-common-protos:
pip install -r clients/python/requirements.txt).

The server address comes from REDQ_ADDR (default 127.0.0.1:50051). The last
line printed starts with OK: or FAIL: (then the exit status is 1).
"""

import argparse
import os
import queue
import sys
import time
import uuid

try:
    import redq
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import redq
    except ImportError as err:
        sys.exit(f"FAIL: python client: cannot import redq ({err}); pip install -r clients/python/requirements.txt")

import grpc  # noqa: E402 (after the import above, which explains a missing grpcio)

ADDR = os.environ.get("REDQ_ADDR", "127.0.0.1:50051")
CALL_TIMEOUT = 5.0  # seconds: to connect, and for each call
RECEIVE_TIMEOUT = 15.0  # seconds, for the whole receive phase of the demo


class StepFailed(Exception):
    pass


def fmt(dt):
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_server():
    channel = grpc.insecure_channel(ADDR)
    try:
        grpc.channel_ready_future(channel).result(timeout=CALL_TIMEOUT)
    except grpc.FutureTimeoutError:
        raise StepFailed(f"could not connect to redq at {ADDR} within {CALL_TIMEOUT:.0f}s (set REDQ_ADDR?)")
    finally:
        channel.close()


def demo():
    topic = f"demo-python-{uuid.uuid4().hex[:12]}"
    subscription = "demo"
    check_server()
    print(f"python client: server {ADDR}, topic {topic}")
    with redq.Publisher(ADDR) as publisher, redq.Client(ADDR, timeout=CALL_TIMEOUT) as client, \
            redq.Subscriber(ADDR) as subscriber:
        # 1. Publish three messages: the publisher sends them as one batch.
        batch = [f"batch-{i}" for i in (1, 2, 3)]
        futures = [publisher.publish(topic, p.encode(), attributes={"lang": "python", "n": str(i)})
                   for i, p in enumerate(batch, 1)]
        ids = [f.result(CALL_TIMEOUT) for f in futures]
        print(f"published batch of 3: ids {ids} ({publisher.stats.requests_sent} request)")

        # 2. Schedule one message for one second from now.
        scheduled = client.schedule(topic, b"delayed", delay=1, attributes={"lang": "python"})
        print(f"scheduled 'delayed' (delay 1s): id {scheduled.message_id}, deliver_at {fmt(scheduled.deliver_at)}")

        # 3. Subscribe. The handler (in the subscriber's thread pool) decides and
        #    reports to this thread, which checks with a deadline.
        inbox = queue.Queue()
        nacked = []  # when batch-2 was nacked

        def handler(message):
            name = message.payload.decode(errors="replace")
            if name == "batch-2" and not nacked:
                nacked.append(time.time())
                message.nack(0)  # an explicit zero delay: redeliver now
                inbox.put((time.time(), message, "nack (delay 0s)"))
            else:
                message.ack()
                inbox.put((time.time(), message, "ack"))

        sub = subscriber.subscribe(topic, subscription, handler, consumer="python-demo", max_outstanding=10,
                                   concurrency=1, ack_deadline=10, start="earliest")
        print(f"subscribed: subscription {subscription}, ack deadline 10s")

        # 4. Everything acked, batch-2 after a nack and a redelivery as attempt 2.
        acked = set()
        deadline = time.monotonic() + RECEIVE_TIMEOUT
        while len(acked) < 4:
            try:
                arrival, message, verdict = inbox.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                waiting = sorted(set(batch + ["delayed"]) - acked)
                raise StepFailed(f"timed out after {RECEIVE_TIMEOUT:.0f}s waiting for {waiting}")
            name, attempt = message.payload.decode(errors="replace"), message.delivery_attempt
            where = f"{name} (id {message.id}, attempt {attempt})"
            if name in acked:
                raise StepFailed(f"received {where} again after it was acked")
            if verdict.startswith("nack"):
                if attempt != 1:
                    raise StepFailed(f"received {where}, expected attempt 1")
                print(f"received {where} -> {verdict}")
                continue
            if name == "batch-2":
                if attempt != 2:
                    raise StepFailed(f"received {where} after the nack, expected attempt 2")
                print(f"received {where} {(arrival - nacked[0]) * 1000:.0f} ms after the nack -> ack")
            elif name in batch:
                if attempt != 1:
                    raise StepFailed(f"received {where}, expected attempt 1")
                if message.attributes.get("lang") != "python":
                    raise StepFailed(f"received {where} with attributes {message.attributes}")
                print(f"received {where} -> ack")
            elif name == "delayed":
                if message.id != scheduled.message_id:
                    raise StepFailed(f"received {where}, expected id {scheduled.message_id}")
                due = message.deliver_at.timestamp()
                if arrival < due:
                    raise StepFailed(f"received {where} {due - arrival:.3f}s before its deliver_at")
                print(f"received {where} at +{(arrival - due) * 1000:.0f} ms after its deliver_at "
                      f"{fmt(message.deliver_at)} (not early) -> ack")
            else:
                raise StepFailed(f"received unexpected message {where}")
            acked.add(name)
        sub.close()  # sends the last acks before the stream ends
    print("OK: python client: published 3, scheduled 1, acked 4, nacked 1 and got it back as attempt 2, "
          "delayed message not early")


def publish(args):
    attributes = {}
    for kv in args.attr:
        key, sep, value = kv.partition("=")
        if not sep:
            raise StepFailed(f"--attr {kv!r}: expected KEY=VALUE")
        attributes[key] = value
    check_server()
    with redq.Publisher(ADDR) as publisher:
        futures = [publisher.publish(args.topic, p.encode(), attributes=attributes) for p in args.payload]
        for payload, future in zip(args.payload, futures):
            print(f"published {payload!r} to {args.topic}: id {future.result(CALL_TIMEOUT)}")
    print(f"OK: python client: published {len(args.payload)} message(s) to {args.topic}")


def main():
    parser = argparse.ArgumentParser(description="Example redq client (server: $REDQ_ADDR, default 127.0.0.1:50051)")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("demo", help="run every step and check it (the default)")
    p = sub.add_parser("publish", help="publish messages to a topic")
    p.add_argument("topic")
    p.add_argument("payload", nargs="+", help="message payloads (UTF-8 text)")
    p.add_argument("--attr", action="append", default=[], metavar="KEY=VALUE", help="attribute of every message")
    args = parser.parse_args()
    try:
        if args.command == "publish":
            publish(args)
        else:
            demo()
    except StepFailed as err:
        sys.exit(f"FAIL: python client: {err}")
    except redq.RedqError as err:
        sys.exit(f"FAIL: python client: {err}")
    except TimeoutError as err:
        sys.exit(f"FAIL: python client: timed out: {err}")


if __name__ == "__main__":
    main()
