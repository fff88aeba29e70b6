import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from redq.v1 import queue_pb2 as _queue_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOPIC_KIND_UNSPECIFIED: _ClassVar[TopicKind]
    TOPIC_KIND_STREAM: _ClassVar[TopicKind]
    TOPIC_KIND_EPHEMERAL: _ClassVar[TopicKind]
    TOPIC_KIND_LIST: _ClassVar[TopicKind]

class DeadLetterReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEAD_LETTER_REASON_UNSPECIFIED: _ClassVar[DeadLetterReason]
    DEAD_LETTER_REASON_NACKED: _ClassVar[DeadLetterReason]
    DEAD_LETTER_REASON_DEADLINE_EXCEEDED: _ClassVar[DeadLetterReason]
TOPIC_KIND_UNSPECIFIED: TopicKind
TOPIC_KIND_STREAM: TopicKind
TOPIC_KIND_EPHEMERAL: TopicKind
TOPIC_KIND_LIST: TopicKind
DEAD_LETTER_REASON_UNSPECIFIED: DeadLetterReason
DEAD_LETTER_REASON_NACKED: DeadLetterReason
DEAD_LETTER_REASON_DEADLINE_EXCEEDED: DeadLetterReason

class TopicSettings(_message.Message):
    __slots__ = ("retention_max_age", "retention_max_length", "hard_max_length", "dedupe_window", "max_payload_bytes", "kind", "list_key")
    RETENTION_MAX_AGE_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    HARD_MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MAX_PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIST_KEY_FIELD_NUMBER: _ClassVar[int]
    retention_max_age: _duration_pb2.Duration
    retention_max_length: int
    hard_max_length: int
    dedupe_window: _duration_pb2.Duration
    max_payload_bytes: int
    kind: TopicKind
    list_key: str
    def __init__(self, retention_max_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retention_max_length: _Optional[int] = ..., hard_max_length: _Optional[int] = ..., dedupe_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_payload_bytes: _Optional[int] = ..., kind: _Optional[_Union[TopicKind, str]] = ..., list_key: _Optional[str] = ...) -> None: ...

class TopicStats(_message.Message):
    __slots__ = ("stream_length", "scheduled_count", "next_due", "published_count", "dropped_count")
    STREAM_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_DUE_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    DROPPED_COUNT_FIELD_NUMBER: _ClassVar[int]
    stream_length: int
    scheduled_count: int
    next_due: _timestamp_pb2.Timestamp
    published_count: int
    dropped_count: int
    def __init__(self, stream_length: _Optional[int] = ..., scheduled_count: _Optional[int] = ..., next_due: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., published_count: _Optional[int] = ..., dropped_count: _Optional[int] = ...) -> None: ...

class Topic(_message.Message):
    __slots__ = ("name", "settings", "stats", "subscriptions", "unavailable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    settings: TopicSettings
    stats: TopicStats
    subscriptions: _containers.RepeatedScalarFieldContainer[str]
    unavailable: bool
    def __init__(self, name: _Optional[str] = ..., settings: _Optional[_Union[TopicSettings, _Mapping]] = ..., stats: _Optional[_Union[TopicStats, _Mapping]] = ..., subscriptions: _Optional[_Iterable[str]] = ..., unavailable: _Optional[bool] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "settings")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    settings: TopicSettings
    def __init__(self, name: _Optional[str] = ..., settings: _Optional[_Union[TopicSettings, _Mapping]] = ...) -> None: ...

class GetTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics", "next_page_token")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    next_page_token: str
    def __init__(self, topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("name", "settings")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    settings: TopicSettings
    def __init__(self, name: _Optional[str] = ..., settings: _Optional[_Union[TopicSettings, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubscriptionSettings(_message.Message):
    __slots__ = ("ack_deadline", "retry_policy", "max_delivery_attempts", "dead_lettering", "start", "message_ordering", "max_blocked", "filter", "max_deliveries_per_second", "burst", "max_outstanding")
    ACK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERING_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ORDERING_FIELD_NUMBER: _ClassVar[int]
    MAX_BLOCKED_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTSTANDING_FIELD_NUMBER: _ClassVar[int]
    ack_deadline: _duration_pb2.Duration
    retry_policy: _queue_pb2.RetryPolicy
    max_delivery_attempts: int
    dead_lettering: bool
    start: _queue_pb2.StartPosition
    message_ordering: bool
    max_blocked: int
    filter: str
    max_deliveries_per_second: float
    burst: int
    max_outstanding: int
    def __init__(self, ack_deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_policy: _Optional[_Union[_queue_pb2.RetryPolicy, _Mapping]] = ..., max_delivery_attempts: _Optional[int] = ..., dead_lettering: _Optional[bool] = ..., start: _Optional[_Union[_queue_pb2.StartPosition, str]] = ..., message_ordering: _Optional[bool] = ..., max_blocked: _Optional[int] = ..., filter: _Optional[str] = ..., max_deliveries_per_second: _Optional[float] = ..., burst: _Optional[int] = ..., max_outstanding: _Optional[int] = ...) -> None: ...

class ConsumerStats(_message.Message):
    __slots__ = ("name", "pending", "idle")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    pending: int
    idle: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., pending: _Optional[int] = ..., idle: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SubscriptionStats(_message.Message):
    __slots__ = ("pending", "lag", "oldest_unacked_age", "consumers", "dead_letters", "acked_count", "active_keys", "blocked", "oldest_blocked_age", "at_blocked_cap", "rate_limited", "at_max_outstanding")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_AGE_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    ACKED_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_KEYS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_BLOCKED_AGE_FIELD_NUMBER: _ClassVar[int]
    AT_BLOCKED_CAP_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    AT_MAX_OUTSTANDING_FIELD_NUMBER: _ClassVar[int]
    pending: int
    lag: int
    oldest_unacked_age: _duration_pb2.Duration
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerStats]
    dead_letters: int
    acked_count: int
    active_keys: int
    blocked: int
    oldest_blocked_age: _duration_pb2.Duration
    at_blocked_cap: bool
    rate_limited: bool
    at_max_outstanding: bool
    def __init__(self, pending: _Optional[int] = ..., lag: _Optional[int] = ..., oldest_unacked_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., consumers: _Optional[_Iterable[_Union[ConsumerStats, _Mapping]]] = ..., dead_letters: _Optional[int] = ..., acked_count: _Optional[int] = ..., active_keys: _Optional[int] = ..., blocked: _Optional[int] = ..., oldest_blocked_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., at_blocked_cap: _Optional[bool] = ..., rate_limited: _Optional[bool] = ..., at_max_outstanding: _Optional[bool] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "name", "settings", "stats")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    settings: SubscriptionSettings
    stats: SubscriptionStats
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ..., settings: _Optional[_Union[SubscriptionSettings, _Mapping]] = ..., stats: _Optional[_Union[SubscriptionStats, _Mapping]] = ...) -> None: ...

class CreateSubscriptionRequest(_message.Message):
    __slots__ = ("topic", "name", "settings")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    settings: SubscriptionSettings
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ..., settings: _Optional[_Union[SubscriptionSettings, _Mapping]] = ...) -> None: ...

class GetSubscriptionRequest(_message.Message):
    __slots__ = ("topic", "name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListSubscriptionsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ListSubscriptionsResponse(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    def __init__(self, subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ...) -> None: ...

class UpdateSubscriptionRequest(_message.Message):
    __slots__ = ("topic", "name", "settings")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    settings: SubscriptionSettings
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ..., settings: _Optional[_Union[SubscriptionSettings, _Mapping]] = ...) -> None: ...

class DeleteSubscriptionRequest(_message.Message):
    __slots__ = ("topic", "name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("topic", "subscription", "page_size", "page_token")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    page_size: int
    page_token: str
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("dead_letter_id", "message", "delivery_attempts", "reason", "dead_lettered_at")
    DEAD_LETTER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_AT_FIELD_NUMBER: _ClassVar[int]
    dead_letter_id: str
    message: _queue_pb2.Message
    delivery_attempts: int
    reason: DeadLetterReason
    dead_lettered_at: _timestamp_pb2.Timestamp
    def __init__(self, dead_letter_id: _Optional[str] = ..., message: _Optional[_Union[_queue_pb2.Message, _Mapping]] = ..., delivery_attempts: _Optional[int] = ..., reason: _Optional[_Union[DeadLetterReason, str]] = ..., dead_lettered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RedriveDeadLettersRequest(_message.Message):
    __slots__ = ("topic", "subscription", "dead_letter_ids", "max_per_second")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    dead_letter_ids: _containers.RepeatedScalarFieldContainer[str]
    max_per_second: int
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., dead_letter_ids: _Optional[_Iterable[str]] = ..., max_per_second: _Optional[int] = ...) -> None: ...

class RedriveDeadLettersResponse(_message.Message):
    __slots__ = ("redriven",)
    REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    redriven: int
    def __init__(self, redriven: _Optional[int] = ...) -> None: ...

class PurgeDeadLettersRequest(_message.Message):
    __slots__ = ("topic", "subscription", "dead_letter_ids")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_IDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    dead_letter_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., dead_letter_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PurgeDeadLettersResponse(_message.Message):
    __slots__ = ("purged",)
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class SeekRequest(_message.Message):
    __slots__ = ("topic", "subscription", "time", "message_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    time: _timestamp_pb2.Timestamp
    message_id: str
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message_id: _Optional[str] = ...) -> None: ...

class SeekResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("topic", "name", "cron", "every", "time_zone", "message", "start_time", "end_time", "paused", "catch_up", "next_run", "last_run", "runs")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    EVERY_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    cron: str
    every: _duration_pb2.Duration
    time_zone: str
    message: _queue_pb2.PublishMessage
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    paused: bool
    catch_up: int
    next_run: _timestamp_pb2.Timestamp
    last_run: _timestamp_pb2.Timestamp
    runs: int
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ..., cron: _Optional[str] = ..., every: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., time_zone: _Optional[str] = ..., message: _Optional[_Union[_queue_pb2.PublishMessage, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., paused: _Optional[bool] = ..., catch_up: _Optional[int] = ..., next_run: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_run: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., runs: _Optional[int] = ...) -> None: ...

class PutScheduleRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("topic", "name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("topic", "page_size", "page_token")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    topic: str
    page_size: int
    page_token: str
    def __init__(self, topic: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("topic", "name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
