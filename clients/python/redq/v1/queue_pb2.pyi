import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    START_POSITION_UNSPECIFIED: _ClassVar[StartPosition]
    START_POSITION_EARLIEST: _ClassVar[StartPosition]
    START_POSITION_LATEST: _ClassVar[StartPosition]
START_POSITION_UNSPECIFIED: StartPosition
START_POSITION_EARLIEST: StartPosition
START_POSITION_LATEST: StartPosition

class PublishMessage(_message.Message):
    __slots__ = ("payload", "attributes", "ordering_key", "dedupe_id", "deliver_at", "delay")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    attributes: _containers.ScalarMap[str, str]
    ordering_key: str
    dedupe_id: str
    deliver_at: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    def __init__(self, payload: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., ordering_key: _Optional[str] = ..., dedupe_id: _Optional[str] = ..., deliver_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("topic", "messages", "dedupe_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[PublishMessage]
    dedupe_id: str
    def __init__(self, topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[PublishMessage, _Mapping]]] = ..., dedupe_id: _Optional[str] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("message_ids", "duplicates", "deliver_at")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    duplicates: _containers.RepeatedScalarFieldContainer[bool]
    deliver_at: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ..., duplicates: _Optional[_Iterable[bool]] = ..., deliver_at: _Optional[_Iterable[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]]] = ...) -> None: ...

class ScheduleDelayedRequest(_message.Message):
    __slots__ = ("topic", "message", "deliver_at", "delay")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message: PublishMessage
    deliver_at: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., message: _Optional[_Union[PublishMessage, _Mapping]] = ..., deliver_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ScheduleDelayedResponse(_message.Message):
    __slots__ = ("message_id", "deliver_at", "duplicate")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    deliver_at: _timestamp_pb2.Timestamp
    duplicate: bool
    def __init__(self, message_id: _Optional[str] = ..., deliver_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class CancelScheduledRequest(_message.Message):
    __slots__ = ("topic", "message_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: str
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class CancelScheduledResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    def __init__(self, cancelled: _Optional[bool] = ...) -> None: ...

class RescheduleDelayedRequest(_message.Message):
    __slots__ = ("topic", "message_id", "deliver_at", "delay")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: str
    deliver_at: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[str] = ..., deliver_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RescheduleDelayedResponse(_message.Message):
    __slots__ = ("rescheduled", "deliver_at")
    RESCHEDULED_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    rescheduled: bool
    deliver_at: _timestamp_pb2.Timestamp
    def __init__(self, rescheduled: _Optional[bool] = ..., deliver_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("minimum_backoff", "maximum_backoff")
    MINIMUM_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    minimum_backoff: _duration_pb2.Duration
    maximum_backoff: _duration_pb2.Duration
    def __init__(self, minimum_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., maximum_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("topic", "subscription", "consumer", "max_outstanding_messages", "ack_deadline", "start", "retry_policy", "max_delivery_attempts", "max_outstanding_bytes", "enable_message_ordering", "pattern")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTSTANDING_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ACK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTSTANDING_BYTES_FIELD_NUMBER: _ClassVar[int]
    ENABLE_MESSAGE_ORDERING_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    consumer: str
    max_outstanding_messages: int
    ack_deadline: _duration_pb2.Duration
    start: StartPosition
    retry_policy: RetryPolicy
    max_delivery_attempts: int
    max_outstanding_bytes: int
    enable_message_ordering: bool
    pattern: str
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., consumer: _Optional[str] = ..., max_outstanding_messages: _Optional[int] = ..., ack_deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., start: _Optional[_Union[StartPosition, str]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., max_delivery_attempts: _Optional[int] = ..., max_outstanding_bytes: _Optional[int] = ..., enable_message_ordering: _Optional[bool] = ..., pattern: _Optional[str] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("messages", "confirmation", "dropped")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    confirmation: AckConfirmation
    dropped: int
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ..., confirmation: _Optional[_Union[AckConfirmation, _Mapping]] = ..., dropped: _Optional[int] = ...) -> None: ...

class PublishStreamRequest(_message.Message):
    __slots__ = ("request_id", "topic", "messages", "dedupe_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[PublishMessage]
    dedupe_id: str
    def __init__(self, request_id: _Optional[int] = ..., topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[PublishMessage, _Mapping]]] = ..., dedupe_id: _Optional[str] = ...) -> None: ...

class PublishStreamResponse(_message.Message):
    __slots__ = ("request_id", "status", "message_ids", "duplicates", "deliver_at")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    status: _status_pb2.Status
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    duplicates: _containers.RepeatedScalarFieldContainer[bool]
    deliver_at: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    def __init__(self, request_id: _Optional[int] = ..., status: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., message_ids: _Optional[_Iterable[str]] = ..., duplicates: _Optional[_Iterable[bool]] = ..., deliver_at: _Optional[_Iterable[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]]] = ...) -> None: ...

class StreamingSubscribeRequest(_message.Message):
    __slots__ = ("subscribe", "ack_ids", "nack_ids", "nack_delay", "modify_deadline_ack_ids", "modify_deadline", "max_outstanding_messages", "max_outstanding_bytes", "confirm")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    ACK_IDS_FIELD_NUMBER: _ClassVar[int]
    NACK_IDS_FIELD_NUMBER: _ClassVar[int]
    NACK_DELAY_FIELD_NUMBER: _ClassVar[int]
    MODIFY_DEADLINE_ACK_IDS_FIELD_NUMBER: _ClassVar[int]
    MODIFY_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTSTANDING_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTSTANDING_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_FIELD_NUMBER: _ClassVar[int]
    subscribe: SubscribeRequest
    ack_ids: _containers.RepeatedScalarFieldContainer[str]
    nack_ids: _containers.RepeatedScalarFieldContainer[str]
    nack_delay: _duration_pb2.Duration
    modify_deadline_ack_ids: _containers.RepeatedScalarFieldContainer[str]
    modify_deadline: _duration_pb2.Duration
    max_outstanding_messages: int
    max_outstanding_bytes: int
    confirm: bool
    def __init__(self, subscribe: _Optional[_Union[SubscribeRequest, _Mapping]] = ..., ack_ids: _Optional[_Iterable[str]] = ..., nack_ids: _Optional[_Iterable[str]] = ..., nack_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., modify_deadline_ack_ids: _Optional[_Iterable[str]] = ..., modify_deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_outstanding_messages: _Optional[int] = ..., max_outstanding_bytes: _Optional[int] = ..., confirm: _Optional[bool] = ...) -> None: ...

class AckConfirmation(_message.Message):
    __slots__ = ("acked_ids", "nacked_ids", "modified_ids", "lost_ids", "invalid_ids")
    ACKED_IDS_FIELD_NUMBER: _ClassVar[int]
    NACKED_IDS_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_IDS_FIELD_NUMBER: _ClassVar[int]
    LOST_IDS_FIELD_NUMBER: _ClassVar[int]
    INVALID_IDS_FIELD_NUMBER: _ClassVar[int]
    acked_ids: _containers.RepeatedScalarFieldContainer[str]
    nacked_ids: _containers.RepeatedScalarFieldContainer[str]
    modified_ids: _containers.RepeatedScalarFieldContainer[str]
    lost_ids: _containers.RepeatedScalarFieldContainer[str]
    invalid_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, acked_ids: _Optional[_Iterable[str]] = ..., nacked_ids: _Optional[_Iterable[str]] = ..., modified_ids: _Optional[_Iterable[str]] = ..., lost_ids: _Optional[_Iterable[str]] = ..., invalid_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("ack_id", "message", "delivery_attempt")
    ACK_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ack_id: str
    message: Message
    delivery_attempt: int
    def __init__(self, ack_id: _Optional[str] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., delivery_attempt: _Optional[int] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("id", "payload", "attributes", "ordering_key", "publish_time", "deliver_at", "topic")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    id: str
    payload: bytes
    attributes: _containers.ScalarMap[str, str]
    ordering_key: str
    publish_time: _timestamp_pb2.Timestamp
    deliver_at: _timestamp_pb2.Timestamp
    topic: str
    def __init__(self, id: _Optional[str] = ..., payload: _Optional[bytes] = ..., attributes: _Optional[_Mapping[str, str]] = ..., ordering_key: _Optional[str] = ..., publish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deliver_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., topic: _Optional[str] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("topic", "subscription", "ack_ids")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACK_IDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    ack_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., ack_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("topic", "subscription", "ack_ids", "delay")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACK_IDS_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    ack_ids: _containers.RepeatedScalarFieldContainer[str]
    delay: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., ack_ids: _Optional[_Iterable[str]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModifyAckDeadlineRequest(_message.Message):
    __slots__ = ("topic", "subscription", "ack_ids", "ack_deadline")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACK_IDS_FIELD_NUMBER: _ClassVar[int]
    ACK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    ack_ids: _containers.RepeatedScalarFieldContainer[str]
    ack_deadline: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., ack_ids: _Optional[_Iterable[str]] = ..., ack_deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ModifyAckDeadlineResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
