"""The plain types the Client's admin methods return (and take): topics,
subscriptions, their settings and stats, dead letters, recurring schedules.

Durations are datetime.timedelta and times timezone-aware UTC datetimes; a
setting the server did not report (or an admin call should leave as it is)
is None. The Client's methods take durations as a timedelta or a number of
seconds, and times as a datetime (naive means UTC) or seconds since the
epoch.

    with redq.Client() as client:
        topic = client.get_topic("orders")            # redq.admin.Topic
        print(topic.stats.published_count, topic.settings.retention_max_age)
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Dict, Generic, List, Optional, TypeVar

from google.protobuf.message import Message as _ProtoMessage

from . import _common
from .v1 import admin_pb2
from .v1 import queue_pb2 as pb

T = TypeVar("T")

_START_NAMES = {pb.START_POSITION_EARLIEST: "earliest", pb.START_POSITION_LATEST: "latest"}
_START_VALUES = {name: value for value, name in _START_NAMES.items()}
_KIND_NAMES = {admin_pb2.TOPIC_KIND_STREAM: "stream", admin_pb2.TOPIC_KIND_EPHEMERAL: "ephemeral",
               admin_pb2.TOPIC_KIND_LIST: "list"}
_KIND_VALUES = {name: value for value, name in _KIND_NAMES.items()}
_REASONS = {admin_pb2.DEAD_LETTER_REASON_NACKED: "nacked",
            admin_pb2.DEAD_LETTER_REASON_DEADLINE_EXCEEDED: "deadline_exceeded"}


def _duration(message: _ProtoMessage, field: str) -> Optional[datetime.timedelta]:
    """The timedelta of a Duration field, None when unset."""
    return _common.from_duration(getattr(message, field)) if message.HasField(field) else None


def _optional(message: _ProtoMessage, field: str) -> Any:
    """An `optional` scalar field's value, None when unset."""
    return getattr(message, field) if message.HasField(field) else None


@dataclasses.dataclass
class TopicSettings:
    """A topic's settings (see admin.proto); None: not set (the server's default, or unchanged in an update).
    `kind` is "stream", "ephemeral" or "list" and `list_key` the Redis list of a LIST topic: both set by
    create_topic() only, and reported by get_topic() and list_topics()."""

    retention_max_age: Optional[datetime.timedelta] = None
    retention_max_length: Optional[int] = None
    hard_max_length: Optional[int] = None
    dedupe_window: Optional[datetime.timedelta] = None
    max_payload_bytes: Optional[int] = None
    kind: Optional[str] = None
    list_key: Optional[str] = None

    @classmethod
    def from_proto(cls, message: admin_pb2.TopicSettings) -> TopicSettings:
        return cls(retention_max_age=_duration(message, "retention_max_age"),
                   retention_max_length=_optional(message, "retention_max_length"),
                   hard_max_length=_optional(message, "hard_max_length"),
                   dedupe_window=_duration(message, "dedupe_window"),
                   max_payload_bytes=_optional(message, "max_payload_bytes"),
                   kind=_KIND_NAMES.get(message.kind),
                   list_key=message.list_key or None)

    def to_proto(self) -> admin_pb2.TopicSettings:
        message = admin_pb2.TopicSettings()
        for field in ("retention_max_age", "dedupe_window"):
            value = getattr(self, field)
            if value is not None:
                getattr(message, field).CopyFrom(_common.to_duration(value, field))
        for field in ("retention_max_length", "hard_max_length", "max_payload_bytes", "list_key"):
            value = getattr(self, field)
            if value is not None:
                setattr(message, field, value)
        if self.kind is not None:
            message.kind = topic_kind(self.kind)
        return message


@dataclasses.dataclass
class TopicStats:
    stream_length: int = 0  # entries in the topic's stream
    scheduled_count: int = 0  # scheduled messages not yet due
    next_due: Optional[datetime.datetime] = None  # when the next scheduled one is due
    published_count: int = 0  # messages published since the topic was created
    dropped_count: int = 0  # entries dropped by the hard cap, unacked by some subscription

    @classmethod
    def from_proto(cls, message: admin_pb2.TopicStats) -> TopicStats:
        return cls(stream_length=message.stream_length, scheduled_count=message.scheduled_count,
                   next_due=_common.from_timestamp(message.next_due), published_count=message.published_count,
                   dropped_count=message.dropped_count)


@dataclasses.dataclass
class Topic:
    """A topic. `stats` is None in list_topics() (use get_topic()); `unavailable`:
    listed by name only, its Redis node or shard could not be reached."""

    name: str
    settings: TopicSettings
    stats: Optional[TopicStats]
    subscriptions: List[str]
    unavailable: bool = False

    @classmethod
    def from_proto(cls, message: admin_pb2.Topic) -> Topic:
        return cls(name=message.name, settings=TopicSettings.from_proto(message.settings),
                   stats=TopicStats.from_proto(message.stats) if message.HasField("stats") else None,
                   subscriptions=list(message.subscriptions),
                   unavailable=message.unavailable)


@dataclasses.dataclass
class RetryPolicy:
    """Backoff between deliveries of a nacked or expired message: minimum * 2^(attempt-1), capped at maximum."""

    minimum_backoff: datetime.timedelta
    maximum_backoff: datetime.timedelta

    @classmethod
    def from_proto(cls, message: pb.RetryPolicy) -> RetryPolicy:
        return cls(_common.from_duration(message.minimum_backoff), _common.from_duration(message.maximum_backoff))

    def to_proto(self) -> pb.RetryPolicy:
        return pb.RetryPolicy(minimum_backoff=_common.to_duration(self.minimum_backoff, "minimum_backoff"),
                              maximum_backoff=_common.to_duration(self.maximum_backoff, "maximum_backoff"))


@dataclasses.dataclass
class SubscriptionSettings:
    """A subscription's settings (see admin.proto); None: not set (the server's default, or unchanged in an
    update). `start` is "earliest" or "latest" (create only); `retry_policy` a RetryPolicy or a
    (minimum, maximum) pair."""

    ack_deadline: Optional[datetime.timedelta] = None
    retry_policy: Optional[RetryPolicy] = None
    max_delivery_attempts: Optional[int] = None
    dead_lettering: Optional[bool] = None
    start: Optional[str] = None
    message_ordering: Optional[bool] = None
    max_blocked: Optional[int] = None
    max_deliveries_per_second: Optional[float] = None
    burst: Optional[int] = None
    max_outstanding: Optional[int] = None

    @classmethod
    def from_proto(cls, message: admin_pb2.SubscriptionSettings) -> SubscriptionSettings:
        return cls(ack_deadline=_duration(message, "ack_deadline"),
                   retry_policy=RetryPolicy.from_proto(message.retry_policy)
                   if message.HasField("retry_policy") else None,
                   max_delivery_attempts=_optional(message, "max_delivery_attempts"),
                   dead_lettering=_optional(message, "dead_lettering"),
                   start=_START_NAMES.get(message.start),
                   message_ordering=_optional(message, "message_ordering"),
                   max_blocked=_optional(message, "max_blocked"),
                   max_deliveries_per_second=_optional(message, "max_deliveries_per_second"),
                   burst=_optional(message, "burst"),
                   max_outstanding=_optional(message, "max_outstanding"))

    def to_proto(self) -> admin_pb2.SubscriptionSettings:
        message = admin_pb2.SubscriptionSettings()
        if self.ack_deadline is not None:
            message.ack_deadline.CopyFrom(_common.to_duration(self.ack_deadline, "ack_deadline"))
        if self.retry_policy is not None:
            policy = self.retry_policy
            if not isinstance(policy, RetryPolicy):
                policy = RetryPolicy(*policy)
            message.retry_policy.CopyFrom(policy.to_proto())
        for field in ("max_delivery_attempts", "dead_lettering", "message_ordering", "max_blocked",
                      "max_deliveries_per_second", "burst", "max_outstanding"):
            value = getattr(self, field)
            if value is not None:
                setattr(message, field, value)
        if self.start is not None:
            message.start = start_position(self.start)
        return message


def topic_kind(kind: str) -> "admin_pb2.TopicKind":
    """The TopicKind of "stream", "ephemeral" or "list"."""
    try:
        return _KIND_VALUES[kind]
    except (KeyError, TypeError):
        raise ValueError(f"redq: kind must be 'stream', 'ephemeral' or 'list', not {kind!r}") from None


def start_position(start: str) -> "pb.StartPosition":
    """The StartPosition of "earliest" or "latest"."""
    try:
        return _START_VALUES[start]
    except (KeyError, TypeError):
        raise ValueError(f"redq: start must be 'earliest' or 'latest', not {start!r}") from None


@dataclasses.dataclass
class ConsumerStats:
    name: str
    pending: int  # deliveries it holds
    idle: datetime.timedelta  # since it last fetched

    @classmethod
    def from_proto(cls, message: admin_pb2.ConsumerStats) -> ConsumerStats:
        return cls(message.name, message.pending, _common.from_duration(message.idle))


@dataclasses.dataclass
class SubscriptionStats:
    pending: int = 0  # delivered and not yet acked (including those waiting for a retry)
    lag: int = 0  # in the stream, not yet delivered to this subscription
    oldest_unacked_age: Optional[datetime.timedelta] = None
    consumers: List[ConsumerStats] = dataclasses.field(default_factory=list)
    dead_letters: int = 0
    acked_count: int = 0  # acked since the subscription was created
    active_keys: int = 0  # ordered: keys held by a delivery
    blocked: int = 0  # ordered: entries waiting for their key
    oldest_blocked_age: Optional[datetime.timedelta] = None
    at_blocked_cap: bool = False
    rate_limited: bool = False  # the token bucket holds back deliveries
    at_max_outstanding: bool = False  # max_outstanding messages are leased

    @classmethod
    def from_proto(cls, message: admin_pb2.SubscriptionStats) -> SubscriptionStats:
        return cls(pending=message.pending, lag=message.lag,
                   oldest_unacked_age=_duration(message, "oldest_unacked_age"),
                   consumers=[ConsumerStats.from_proto(c) for c in message.consumers],
                   dead_letters=message.dead_letters, acked_count=message.acked_count,
                   active_keys=message.active_keys, blocked=message.blocked,
                   oldest_blocked_age=_duration(message, "oldest_blocked_age"),
                   at_blocked_cap=message.at_blocked_cap, rate_limited=message.rate_limited,
                   at_max_outstanding=message.at_max_outstanding)


@dataclasses.dataclass
class Subscription:
    """A subscription as the AdminService describes it (not a running one: see Subscriber.subscribe)."""

    topic: str
    name: str
    settings: SubscriptionSettings
    stats: SubscriptionStats

    @classmethod
    def from_proto(cls, message: admin_pb2.Subscription) -> Subscription:
        return cls(topic=message.topic, name=message.name,
                   settings=SubscriptionSettings.from_proto(message.settings),
                   stats=SubscriptionStats.from_proto(message.stats))


@dataclasses.dataclass
class PublishedMessage:
    """A message as it was published (in a dead letter)."""

    id: str
    payload: bytes
    attributes: Dict[str, str]
    ordering_key: str
    publish_time: Optional[datetime.datetime]
    deliver_at: Optional[datetime.datetime]
    topic: str = ""

    @classmethod
    def from_proto(cls, message: pb.Message) -> PublishedMessage:
        return cls(id=message.id, payload=message.payload, attributes=dict(message.attributes),
                   ordering_key=message.ordering_key, publish_time=_common.from_timestamp(message.publish_time),
                   deliver_at=_common.from_timestamp(message.deliver_at), topic=message.topic)


@dataclasses.dataclass
class DeadLetter:
    """A message out of delivery attempts. reason: "nacked", "deadline_exceeded" or "unspecified"."""

    dead_letter_id: str
    message: PublishedMessage
    delivery_attempts: int
    reason: str
    dead_lettered_at: Optional[datetime.datetime]

    @classmethod
    def from_proto(cls, message: admin_pb2.DeadLetter) -> DeadLetter:
        return cls(dead_letter_id=message.dead_letter_id, message=PublishedMessage.from_proto(message.message),
                   delivery_attempts=message.delivery_attempts, reason=_REASONS.get(message.reason, "unspecified"),
                   dead_lettered_at=_common.from_timestamp(message.dead_lettered_at))


@dataclasses.dataclass
class Schedule:
    """A recurring schedule (docs/schedules.md): `cron` (with `time_zone`) or `every`, what each run
    publishes (`payload`, `attributes`, `ordering_key`), and, set by the server, `next_run`
    (None while paused or finished), `last_run` and `runs`."""

    topic: str
    name: str
    cron: str
    every: Optional[datetime.timedelta]
    time_zone: str
    payload: bytes
    attributes: Dict[str, str]
    ordering_key: str
    start_time: Optional[datetime.datetime]
    end_time: Optional[datetime.datetime]
    paused: bool
    catch_up: int
    next_run: Optional[datetime.datetime]
    last_run: Optional[datetime.datetime]
    runs: int

    @classmethod
    def from_proto(cls, message: admin_pb2.Schedule) -> Schedule:
        def time(field: str) -> Optional[datetime.datetime]:
            return _common.from_timestamp(getattr(message, field)) if message.HasField(field) else None

        return cls(topic=message.topic, name=message.name, cron=message.cron, every=_duration(message, "every"),
                   time_zone=message.time_zone, payload=message.message.payload,
                   attributes=dict(message.message.attributes), ordering_key=message.message.ordering_key,
                   start_time=time("start_time"), end_time=time("end_time"), paused=message.paused,
                   catch_up=message.catch_up, next_run=time("next_run"), last_run=time("last_run"),
                   runs=message.runs)


@dataclasses.dataclass
class Page(Generic[T]):
    """One page of a list: `items`, and the token of the next page ("" on the last)."""

    items: List[T]
    next_page_token: str


__all__ = ["ConsumerStats", "DeadLetter", "Page", "PublishedMessage", "RetryPolicy", "Schedule", "Subscription",
           "SubscriptionSettings", "SubscriptionStats", "Topic", "TopicSettings", "TopicStats"]
