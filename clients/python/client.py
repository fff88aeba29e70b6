#!/usr/bin/env python3
"""Example redq client in Python (grpcio).

The stubs are generated from ../../proto with grpcio-tools each time this
script starts, into a temporary directory; nothing generated is kept.

    python client.py                       # the demo: every step, checked
    python client.py publish TOPIC PAYLOAD [PAYLOAD...] [--attr KEY=VALUE]

The server address comes from REDQ_ADDR (default 127.0.0.1:50051).
"""

import argparse
import atexit
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
ADDR = os.environ.get("REDQ_ADDR", "127.0.0.1:50051")
RPC_TIMEOUT = 5.0  # seconds, for each unary call
RECEIVE_TIMEOUT = 15.0  # seconds, for the whole receive phase of the demo


class StepFailed(Exception):
    pass


def generate_stubs():
    """Compiles queue.proto into a temporary directory and imports it."""
    try:
        import grpc  # noqa: F401
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        sys.exit("FAIL: grpcio and grpcio-tools are missing: pip install -r clients/python/requirements.txt")
    out = tempfile.mkdtemp(prefix="redq-py-stubs-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    # grpcio-tools ships google/protobuf/*.proto (Duration, Timestamp) in _proto.
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main([
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        os.path.join(PROTO_DIR, "redq", "v1", "queue.proto"),
    ])
    if rc != 0:
        sys.exit(f"FAIL: protoc could not compile {PROTO_DIR}/redq/v1/queue.proto (exit {rc})")
    sys.path.insert(0, out)
    from redq.v1 import queue_pb2, queue_pb2_grpc
    return queue_pb2, queue_pb2_grpc


pb, pb_grpc = generate_stubs()
import grpc  # noqa: E402  (after the check above, which explains a missing grpcio)
from google.protobuf.duration_pb2 import Duration  # noqa: E402


def fmt_ts(ts):
    return ts.ToDatetime().isoformat(timespec="milliseconds") + "Z"


def ts_seconds(ts):
    return ts.seconds + ts.nanos / 1e9


def connect():
    channel = grpc.insecure_channel(ADDR)
    try:
        grpc.channel_ready_future(channel).result(timeout=RPC_TIMEOUT)
    except grpc.FutureTimeoutError:
        raise StepFailed(f"could not connect to redq at {ADDR} within {RPC_TIMEOUT:.0f}s (set REDQ_ADDR?)")
    return channel, pb_grpc.QueueServiceStub(channel)


def demo():
    topic = f"demo-python-{uuid.uuid4().hex[:12]}"
    subscription = "demo"
    channel, stub = connect()
    print(f"python client: server {ADDR}, topic {topic}")

    # 1. Publish a batch of three messages.
    batch = [f"batch-{i}" for i in (1, 2, 3)]
    resp = stub.Publish(pb.PublishRequest(topic=topic, messages=[
        pb.PublishMessage(payload=p.encode(), attributes={"lang": "python", "n": str(i)})
        for i, p in enumerate(batch, 1)
    ]), timeout=RPC_TIMEOUT)
    if len(resp.message_ids) != 3:
        raise StepFailed(f"Publish returned {len(resp.message_ids)} ids, expected 3")
    print(f"published batch of 3: ids {list(resp.message_ids)}")

    # 2. Schedule one message for one second from now.
    sched = stub.ScheduleDelayed(pb.ScheduleDelayedRequest(
        topic=topic,
        message=pb.PublishMessage(payload=b"delayed", attributes={"lang": "python"}),
        delay=Duration(seconds=1),
    ), timeout=RPC_TIMEOUT)
    delayed_id = sched.message_id
    print(f"scheduled 'delayed' (delay 1s): id {delayed_id}, deliver_at {fmt_ts(sched.deliver_at)}")

    # 3. Subscribe. The stream is read by a thread into a queue, so that the
    #    main thread can wait on it with a deadline.
    call = stub.Subscribe(pb.SubscribeRequest(
        topic=topic,
        subscription=subscription,
        consumer="python-demo",
        max_outstanding_messages=10,
        ack_deadline=Duration(seconds=10),
        start=pb.START_POSITION_EARLIEST,
    ))
    inbox = queue.Queue()

    def reader():
        try:
            for response in call:
                for received in response.messages:
                    inbox.put((time.time(), received))
            inbox.put((time.time(), StepFailed("the Subscribe stream ended")))
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                inbox.put((time.time(), StepFailed(f"Subscribe failed: {err.code().name}: {err.details()}")))

    threading.Thread(target=reader, daemon=True).start()
    print(f"subscribed: subscription {subscription}, ack deadline 10s")

    def ack(received):
        stub.Ack(pb.AckRequest(topic=topic, subscription=subscription, ack_ids=[received.ack_id]),
                 timeout=RPC_TIMEOUT)

    # 4. Ack every message, except the first delivery of batch-2: nack it with
    #    zero delay, receive it again (attempt 2) and ack it then.
    acked = set()
    nacked = None  # when batch-2 was nacked
    deadline = time.monotonic() + RECEIVE_TIMEOUT
    try:
        while len(acked) < 4:
            remaining = deadline - time.monotonic()
            try:
                arrival, item = inbox.get(timeout=max(remaining, 0))
            except queue.Empty:
                waiting = sorted(set(batch + ["delayed"]) - acked)
                raise StepFailed(f"timed out after {RECEIVE_TIMEOUT:.0f}s waiting for {waiting}")
            if isinstance(item, Exception):
                raise item
            msg, attempt = item.message, item.delivery_attempt
            name = msg.payload.decode(errors="replace")
            where = f"{name} (id {msg.id}, attempt {attempt})"
            if name in acked:
                raise StepFailed(f"received {where} again after it was acked")
            if name == "batch-2" and nacked is None:
                if attempt != 1:
                    raise StepFailed(f"received {where}, expected attempt 1")
                nack = pb.NackRequest(topic=topic, subscription=subscription, ack_ids=[item.ack_id])
                nack.delay.SetInParent()  # an explicit zero delay: redeliver now
                nacked = time.time()
                stub.Nack(nack, timeout=RPC_TIMEOUT)
                print(f"received {where} -> nack (delay 0s)")
                continue
            if name == "batch-2":
                if attempt != 2:
                    raise StepFailed(f"received {where} after the nack, expected attempt 2")
                ack(item)
                acked.add(name)
                print(f"received {where} {(arrival - nacked) * 1000:.0f} ms after the nack -> ack")
            elif name in batch:
                if attempt != 1:
                    raise StepFailed(f"received {where}, expected attempt 1")
                ack(item)
                acked.add(name)
                print(f"received {where} -> ack")
            elif name == "delayed":
                if msg.id != delayed_id:
                    raise StepFailed(f"received {where}, expected id {delayed_id}")
                due = ts_seconds(msg.deliver_at)
                if arrival < due:
                    raise StepFailed(f"received {where} {due - arrival:.3f}s before its deliver_at {fmt_ts(msg.deliver_at)}")
                ack(item)
                acked.add(name)
                print(f"received {where} at +{(arrival - due) * 1000:.0f} ms after its deliver_at "
                      f"{fmt_ts(msg.deliver_at)} (not early) -> ack")
            else:
                raise StepFailed(f"received unexpected message {where}")
    finally:
        call.cancel()
        channel.close()
    print("OK: python client: published 3, scheduled 1, acked 4, nacked 1 and got it back as attempt 2, "
          "delayed message not early")


def publish(args):
    attributes = {}
    for kv in args.attr:
        key, sep, value = kv.partition("=")
        if not sep:
            raise StepFailed(f"--attr {kv!r}: expected KEY=VALUE")
        attributes[key] = value
    channel, stub = connect()
    try:
        resp = stub.Publish(pb.PublishRequest(topic=args.topic, messages=[
            pb.PublishMessage(payload=p.encode(), attributes=attributes) for p in args.payload
        ]), timeout=RPC_TIMEOUT)
    finally:
        channel.close()
    for payload, message_id in zip(args.payload, resp.message_ids):
        print(f"published {payload!r} to {args.topic}: id {message_id}")


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
    except grpc.RpcError as err:
        sys.exit(f"FAIL: python client: {err.code().name}: {err.details()}")


if __name__ == "__main__":
    main()
