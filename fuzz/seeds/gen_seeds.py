#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets: fuzz/seeds/<target>/<name>.

The seeds are checked in; run this again (python3 fuzz/seeds/gen_seeds.py)
after a change to the protos or to the selector numbering of
fuzz_targets/requests.rs (KINDS). Protobuf is encoded by hand here, so no
protobuf package is needed.
"""
import hashlib
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))

# The selector byte of each message type: the index in KINDS of requests.rs.
KINDS = [
    "PublishRequest", "ScheduleDelayedRequest", "CancelScheduledRequest",
    "RescheduleDelayedRequest", "SubscribeRequest", "AckRequest", "NackRequest",
    "ModifyAckDeadlineRequest", "PublishStreamRequest", "StreamingSubscribeRequest",
    "CreateTopicRequest", "GetTopicRequest", "ListTopicsRequest", "UpdateTopicRequest",
    "DeleteTopicRequest", "CreateSubscriptionRequest", "GetSubscriptionRequest",
    "ListSubscriptionsRequest", "UpdateSubscriptionRequest", "DeleteSubscriptionRequest",
    "ListDeadLettersRequest", "RedriveDeadLettersRequest", "PurgeDeadLettersRequest",
    "SeekRequest",
]


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def vint(field, n):
    """A varint field (uint32, uint64, int64, int32, bool, enum)."""
    return varint(field << 3) + varint(n)


def ld(field, data):
    """A length-delimited field: bytes, string or message."""
    if isinstance(data, str):
        data = data.encode()
    return varint(field << 3 | 2) + varint(len(data)) + data


def time(field, seconds, nanos=0):
    """google.protobuf.Timestamp or Duration."""
    return ld(field, vint(1, seconds) + (vint(2, nanos) if nanos else b""))


def scope_tag(topic, subscription):
    """src/broker/ack_id.rs scope_tag: FNV-1a, folded to 32 bits."""
    h = 0xCBF29CE484222325
    for b in topic.encode() + b"\n" + subscription.encode():
        h = ((h ^ b) * 0x100000001B3) & ((1 << 64) - 1)
    return (h ^ (h >> 32)) & 0xFFFFFFFF


ACK_ID = "1700000000000-3/2/worker.1-ab12cd34ef56/%08x" % scope_tag("orders", "billing")
OLD_ACK_ID = "1700000000000-4/1/worker.1-ab12cd34ef56"


def message(payload, **extra):
    """A PublishMessage."""
    body = ld(1, payload)
    for key, value in extra.get("attributes", {}).items():
        body += ld(2, ld(1, key) + ld(2, value))
    if "ordering_key" in extra:
        body += ld(3, extra["ordering_key"])
    if "dedupe_id" in extra:
        body += ld(4, extra["dedupe_id"])
    if "deliver_at" in extra:
        body += time(5, extra["deliver_at"])
    if "delay" in extra:
        body += time(6, extra["delay"])
    return body


def retry(minimum, maximum):
    return time(1, minimum) + time(2, maximum)


SUBSCRIBE = (
    ld(1, "orders") + ld(2, "billing") + ld(3, "worker-1") + vint(4, 10) + time(5, 30)
    + vint(6, 2) + ld(7, retry(1, 60)) + vint(8, 5) + vint(9, 1 << 20)
)
TOPIC_SETTINGS = time(1, 3600) + vint(2, 1000) + vint(3, 2000) + time(4, 60) + vint(5, 1024)
SUBSCRIPTION_SETTINGS = time(1, 30) + ld(2, retry(1, 60)) + vint(3, 5) + vint(4, 1) + vint(5, 1)
NAMES = ld(1, "orders") + ld(2, "billing")

MESSAGES = (
    ld(2, message("hello", attributes={"k": "v", "trace": "abc"}, ordering_key="o1",
                  dedupe_id="d-1"))
    + ld(2, message("later", delay=5))
    + ld(2, message("at", deliver_at=1700000000))
)

REQUESTS = {
    "PublishRequest": [ld(1, "orders") + MESSAGES],
    "ScheduleDelayedRequest": [
        ld(1, "orders") + ld(2, message("hi")) + time(4, 60),
        ld(1, "orders") + ld(2, message("hi")) + time(3, 1700000000, 5),
    ],
    "CancelScheduledRequest": [ld(1, "orders") + ld(2, "s0123456789abcdef0123")],
    "RescheduleDelayedRequest": [
        ld(1, "orders") + ld(2, "s0123456789abcdef0123") + time(3, 1700000000),
        ld(1, "orders") + ld(2, "s0123456789abcdef0123") + time(4, 120),
    ],
    "SubscribeRequest": [SUBSCRIBE],
    "AckRequest": [NAMES + ld(3, ACK_ID) + ld(3, OLD_ACK_ID)],
    "NackRequest": [NAMES + ld(3, ACK_ID) + time(4, 10)],
    "ModifyAckDeadlineRequest": [NAMES + ld(3, ACK_ID) + time(4, 0), NAMES + ld(3, ACK_ID) + time(4, 45)],
    "PublishStreamRequest": [vint(1, 7) + ld(2, "orders") + ld(3, message("hello"))],
    "StreamingSubscribeRequest": [
        ld(1, SUBSCRIBE) + ld(2, ACK_ID) + ld(3, OLD_ACK_ID) + time(4, 3) + ld(5, ACK_ID)
        + time(6, 20) + vint(7, 50) + vint(8, 4096) + vint(9, 1),
    ],
    "CreateTopicRequest": [ld(1, "orders") + ld(2, TOPIC_SETTINGS)],
    "GetTopicRequest": [ld(1, "orders")],
    "ListTopicsRequest": [vint(1, 10) + ld(2, "orders")],
    "UpdateTopicRequest": [ld(1, "orders.eu") + ld(2, TOPIC_SETTINGS)],
    "DeleteTopicRequest": [ld(1, "orders")],
    "CreateSubscriptionRequest": [NAMES + ld(3, SUBSCRIPTION_SETTINGS)],
    "GetSubscriptionRequest": [NAMES],
    "ListSubscriptionsRequest": [ld(1, "orders")],
    "UpdateSubscriptionRequest": [NAMES + ld(3, SUBSCRIPTION_SETTINGS)],
    "DeleteSubscriptionRequest": [NAMES],
    "ListDeadLettersRequest": [NAMES + vint(3, 50) + ld(4, "1700000000000-0")],
    "RedriveDeadLettersRequest": [NAMES + ld(3, "1700000000000-0") + ld(3, "2-5") + vint(4, 100)],
    "PurgeDeadLettersRequest": [NAMES + ld(3, "1700000000000-0")],
    "SeekRequest": [NAMES + time(3, 1700000000, 250000000), NAMES + ld(4, "1700000000000-7")],
}

TOKEN = "redq_" + "ab" * 32
TOKENS_FILE = {
    "tokens": [
        {
            "name": "publisher",
            "sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
            "grants": [{"topics": ["orders", "orders.>"], "actions": ["publish", "view"]}],
        },
        {
            "name": "billing",
            "client_cert": "CN=client",
            "grants": [{
                "topics": ["orders.*.eu"],
                "subscriptions": ["billing", "billing.>"],
                "actions": ["subscribe", "browse"],
            }],
        },
        {
            "name": "ops",
            "sha256": hashlib.sha256(b"secret").hexdigest(),
            "grants": [{"topics": [">"], "actions": ["admin"]}, {"topics": ["*"], "actions": ["manage"]}],
        },
    ]
}

SEEDS = {
    "ack_ids": {
        "tagged": ACK_ID,
        "old_form": OLD_ACK_ID,
        "max_entry_id": "18446744073709551615-18446744073709551615/4294967295/c/ffffffff",
        "no_attempt": "1-0//c",
    },
    "tokens_file": {
        "valid": json.dumps(TOKENS_FILE, indent=2),
        "empty": '{"tokens": []}',
        "bad_pattern": '{"tokens": [{"name": "x", "sha256": "%s", "grants": '
                       '[{"topics": ["a.>.b"], "actions": ["view"]}]}]}' % ("0" * 64),
    },
    "patterns": {
        "literal": "orders\norders",
        "literal_other": "orders\norders2",
        "one": "orders.*.eu\norders.x.eu",
        "rest": "orders.>\norders.eu.paris",
        "rest_alone": ">\na.b.c",
        "star": "*\nx",
        "no_name": "orders.eu",
    },
    "entry_ids": {
        "plain": "1700000000000-0",
        "zero": "0-0",
        "max": "18446744073709551615-18446744073709551615",
        "leading_zeros": "0001-02",
        "overflow": "18446744073709551616-0",
        "scheduled": "s0123456789abcdef0123",
    },
}


def write(target, name, data):
    folder = os.path.join(HERE, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main():
    for target in ["requests", *SEEDS]:
        shutil.rmtree(os.path.join(HERE, target), ignore_errors=True)
    assert set(REQUESTS) == set(KINDS), set(KINDS) ^ set(REQUESTS)
    for kind, bodies in REQUESTS.items():
        for i, body in enumerate(bodies):
            write("requests", "%02d_%s_%d" % (KINDS.index(kind), kind, i),
                  bytes([KINDS.index(kind)]) + body)
    for target, seeds in SEEDS.items():
        for name, data in seeds.items():
            write(target, name, data)


if __name__ == "__main__":
    main()
