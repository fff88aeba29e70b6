#!/usr/bin/env python3
"""A logging gRPC proxy for the Pub/Sub v1 API: shows what a client really sends.

Listens on LISTEN (host:port), forwards every google.pubsub.v1 call to UPSTREAM
unchanged (raw bytes both ways), and writes one JSON line per request, response
and end of call to stdout, decoded with the client package's own descriptors:

    python3 trace.py 127.0.0.1:8090 127.0.0.1:8085 > trace.jsonl &
    PUBSUB_EMULATOR_HOST=127.0.0.1:8090 python3 python/example.py

Each line has t (ms since start), call (a number per call), method, dir ("open"
with the call's deadline and headers, "req", "resp", "half-close", "client-gone",
"end" with the status code) and msg (the message as JSON; data and ack ids cut).
Only the request headers that say something about the protocol are logged
(x-goog-*, user-agent). Needs the Python requirements (google-cloud-pubsub brings
the descriptors). Stop it with SIGTERM or Ctrl-C.
"""

import itertools
import json
import signal
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import empty_pb2, json_format, message_factory
from google.pubsub_v1.types import pubsub as pubsub_types

START = time.monotonic()
LOCK = threading.Lock()
CALLS = itertools.count(1)
FILE = pubsub_types.Topic.pb().DESCRIPTOR.file
# Names of header keys worth seeing; credentials are never logged.
LOGGED_HEADERS = ("x-goog-", "user-agent")
BYTES_SHOWN = 64  # of a message's data field, and of ack ids


def emit(**fields):
    line = json.dumps({"t": round((time.monotonic() - START) * 1000), **fields})
    with LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def shorten(value):
    """Cut long strings (ack ids, base64 data) so a trace stays readable."""
    if isinstance(value, str) and len(value) > BYTES_SHOWN:
        return value[:BYTES_SHOWN] + f"...({len(value)})"
    if isinstance(value, list):
        return [shorten(v) for v in value]
    if isinstance(value, dict):
        return {k: shorten(v) for k, v in value.items()}
    return value


def decoder(descriptor):
    cls = message_factory.GetMessageClass(descriptor)

    def decode(raw):
        message = cls()
        message.ParseFromString(raw)
        return shorten(json_format.MessageToDict(message, preserving_proto_field_name=True))

    return decode


# The descriptors that proto-plus registers carry the messages but not the services,
# so the v1 methods are listed here: name -> (request, response, bidi streaming).
SIGNATURES = {
    "Publisher": {
        "CreateTopic": ("Topic", "Topic"),
        "UpdateTopic": ("UpdateTopicRequest", "Topic"),
        "Publish": ("PublishRequest", "PublishResponse"),
        "GetTopic": ("GetTopicRequest", "Topic"),
        "ListTopics": ("ListTopicsRequest", "ListTopicsResponse"),
        "ListTopicSubscriptions": ("ListTopicSubscriptionsRequest", "ListTopicSubscriptionsResponse"),
        "ListTopicSnapshots": ("ListTopicSnapshotsRequest", "ListTopicSnapshotsResponse"),
        "DeleteTopic": ("DeleteTopicRequest", "Empty"),
        "DetachSubscription": ("DetachSubscriptionRequest", "DetachSubscriptionResponse"),
    },
    "Subscriber": {
        "CreateSubscription": ("Subscription", "Subscription"),
        "GetSubscription": ("GetSubscriptionRequest", "Subscription"),
        "UpdateSubscription": ("UpdateSubscriptionRequest", "Subscription"),
        "ListSubscriptions": ("ListSubscriptionsRequest", "ListSubscriptionsResponse"),
        "DeleteSubscription": ("DeleteSubscriptionRequest", "Empty"),
        "ModifyAckDeadline": ("ModifyAckDeadlineRequest", "Empty"),
        "Acknowledge": ("AcknowledgeRequest", "Empty"),
        "Pull": ("PullRequest", "PullResponse"),
        "StreamingPull": ("StreamingPullRequest", "StreamingPullResponse"),
        "ModifyPushConfig": ("ModifyPushConfigRequest", "Empty"),
        "GetSnapshot": ("GetSnapshotRequest", "Snapshot"),
        "ListSnapshots": ("ListSnapshotsRequest", "ListSnapshotsResponse"),
        "CreateSnapshot": ("CreateSnapshotRequest", "Snapshot"),
        "UpdateSnapshot": ("UpdateSnapshotRequest", "Snapshot"),
        "DeleteSnapshot": ("DeleteSnapshotRequest", "Empty"),
        "Seek": ("SeekRequest", "SeekResponse"),
    },
}


def message_descriptor(name):
    if name == "Empty":
        return empty_pb2.Empty.DESCRIPTOR
    return FILE.message_types_by_name[name]


METHODS = {}  # path -> (method name, bidi streaming, decode request, decode response)
for service, methods in SIGNATURES.items():
    for method, (request, response) in methods.items():
        METHODS[f"/google.pubsub.v1.{service}/{method}"] = (
            method,
            method == "StreamingPull",
            decoder(message_descriptor(request)),
            decoder(message_descriptor(response)),
        )


class Proxy(grpc.GenericRpcHandler):
    def __init__(self, channel):
        self.channel = channel

    def service(self, handler_call_details):
        path = handler_call_details.method
        known = METHODS.get(path)
        headers = {
            k: v
            for k, v in handler_call_details.invocation_metadata
            if k.startswith(LOGGED_HEADERS) and isinstance(v, str)
        }
        if known is None:
            return None  # grpc answers UNIMPLEMENTED
        name, streaming, decode_req, decode_resp = known

        def opened(context):
            call_id = next(CALLS)
            timeout = context.time_remaining()  # from the client's grpc-timeout, if it sent one
            emit(
                call=call_id,
                method=name,
                dir="open",
                deadline_s=None if timeout is None else round(timeout),
                headers=headers,
            )
            metadata = [(k, v) for k, v in context.invocation_metadata() if not k.startswith(":")]
            return call_id, metadata, timeout

        def failed(call_id, err, context):
            emit(call=call_id, method=name, dir="end", code=err.code().name, details=err.details())
            context.abort(err.code(), err.details() or "")

        if streaming:
            upstream_stream = self.channel.stream_stream(path)

            def bidi(request_iterator, context):
                call_id, metadata, timeout = opened(context)

                def requests():
                    for raw in request_iterator:
                        emit(call=call_id, method=name, dir="req", msg=decode_req(raw))
                        yield raw
                    emit(call=call_id, method=name, dir="half-close")

                responses = upstream_stream(requests(), metadata=metadata, timeout=timeout)
                # The client going away (cancel, deadline) cancels the upstream call too.
                context.add_callback(lambda: (emit(call=call_id, method=name, dir="client-gone"), responses.cancel()))
                try:
                    for raw in responses:
                        emit(call=call_id, method=name, dir="resp", msg=decode_resp(raw))
                        yield raw
                    emit(call=call_id, method=name, dir="end", code="OK")
                except grpc.RpcError as err:
                    failed(call_id, err, context)

            return grpc.stream_stream_rpc_method_handler(bidi)

        upstream_unary = self.channel.unary_unary(path)

        def unary(raw_request, context):
            call_id, metadata, timeout = opened(context)
            emit(call=call_id, method=name, dir="req", msg=decode_req(raw_request))
            try:
                raw = upstream_unary(raw_request, metadata=metadata, timeout=timeout)
            except grpc.RpcError as err:
                failed(call_id, err, context)
            emit(call=call_id, method=name, dir="resp", msg=decode_resp(raw))
            emit(call=call_id, method=name, dir="end", code="OK")
            return raw

        return grpc.unary_unary_rpc_method_handler(unary)


def main():
    if len(sys.argv) != 3:
        print("usage: trace.py LISTEN_HOST:PORT UPSTREAM_HOST:PORT", file=sys.stderr)
        return 2
    listen, target = sys.argv[1], sys.argv[2]
    channel = grpc.insecure_channel(target)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64), handlers=[Proxy(channel)])
    server.add_insecure_port(listen)
    server.start()
    print(f"trace: {listen} -> {target}", file=sys.stderr)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
