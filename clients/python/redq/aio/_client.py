"""The asyncio Client: unary calls (schedule, cancel, reschedule) and the AdminService as snake_case methods."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable, Literal, Mapping, Optional, Tuple, Union

import grpc

from .. import _common, _security, _unary, admin
from .._common import ChannelOptions, Payload, RedqError, Seconds, Time
from .._security import Pem, Tls
from .._unary import RescheduleResult, ScheduleResult
from ..v1 import admin_pb2, admin_pb2_grpc, queue_pb2_grpc
from ..v1 import queue_pb2 as pb

_ADMIN = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]
_QUEUE = pb.DESCRIPTOR.services_by_name["QueueService"]

RetryPolicyArg = Union[admin.RetryPolicy, Tuple[Seconds, Seconds]]
"""A retry policy: a redq.admin.RetryPolicy or a (minimum, maximum) backoff pair."""


class Client:
    """Unary calls of redq, awaitable.

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051), or
    channel= a Connection (redq.aio.connect()) or a grpc.aio channel, then
    not closed by close(). timeout: seconds per call. token, tls, tls_cert,
    tls_key, tls_server_name: see Publisher.

    The AdminService's calls are methods with plain results (redq.admin's
    dataclasses: durations as timedelta, times as UTC datetimes); they take
    durations as a timedelta or seconds, times as a datetime or epoch
    seconds. `admin_stub` and `queue_stub` are the raw generated stubs (see
    StubProxy), for what these methods do not cover.
    """

    def __init__(self, target: Optional[str] = None, *,
                 channel: Union[_security.Connection, grpc.aio.Channel, None] = None, timeout: Optional[float] = 10.0,
                 channel_options: Optional[ChannelOptions] = None, token: Optional[str] = None, tls: Tls = None,
                 tls_cert: Optional[Pem] = None, tls_key: Optional[Pem] = None,
                 tls_server_name: Optional[str] = None) -> None:
        self._owns_channel = channel is None
        self._channel = _security.open_channel(target, channel, is_async=True, channel_options=channel_options,
                                               token=token, tls=tls, tls_cert=tls_cert, tls_key=tls_key,
                                               tls_server_name=tls_server_name)
        self._timeout = timeout
        self._queue = queue_pb2_grpc.QueueServiceStub(self._channel)
        self._admin = admin_pb2_grpc.AdminServiceStub(self._channel)
        self.queue_stub = _unary.StubProxy(self._queue, _QUEUE, timeout)
        self.admin_stub = _unary.StubProxy(self._admin, _ADMIN, timeout)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: Callable[..., Awaitable[Any]], request: Any) -> Any:
        try:
            return await method(request, timeout=self._timeout)
        except grpc.RpcError as err:
            raise RedqError.from_rpc_error(err) from None

    # ---- scheduling

    async def schedule(self, topic: str, payload: Payload, *, delay: Optional[Seconds] = None,
                       deliver_at: Optional[Time] = None, attributes: Optional[Mapping[str, str]] = None,
                       ordering_key: str = "", dedupe_id: str = "") -> ScheduleResult:
        """Schedules one message after delay (seconds, timedelta) or at deliver_at (datetime, epoch seconds).

        payload: bytes, bytearray or memoryview (a TypeError otherwise).
        Returns ScheduleResult(message_id, deliver_at, duplicate)."""
        request = _unary.schedule_request(topic, payload, delay, deliver_at, attributes, ordering_key, dedupe_id)
        return _unary.schedule_result(await self._call(self._queue.ScheduleDelayed, request))

    async def cancel(self, topic: str, message_id: str) -> bool:
        """Cancels a scheduled message; False if it was already delivered, cancelled or unknown."""
        request = pb.CancelScheduledRequest(topic=topic, message_id=message_id)
        return (await self._call(self._queue.CancelScheduled, request)).cancelled

    async def reschedule(self, topic: str, message_id: str, *, delay: Optional[Seconds] = None,
                         deliver_at: Optional[Time] = None) -> RescheduleResult:
        """Moves a scheduled message to a new time; returns RescheduleResult(rescheduled, deliver_at)."""
        request = _unary.reschedule_request(topic, message_id, delay, deliver_at)
        return _unary.reschedule_result(await self._call(self._queue.RescheduleDelayed, request))

    # ---- topics

    async def create_topic(self, name: str, *, kind: Optional[Literal["stream", "ephemeral", "list"]] = None,
                           list_key: Optional[str] = None, retention_max_age: Optional[Seconds] = None,
                           retention_max_length: Optional[int] = None, hard_max_length: Optional[int] = None,
                           dedupe_window: Optional[Seconds] = None,
                           max_payload_bytes: Optional[int] = None) -> admin.Topic:
        """Creates a topic (ALREADY_EXISTS if it exists); returns its redq.admin.Topic.

        kind: "stream" (the default), "ephemeral" (live fan-out, nothing kept)
        or "list" (the Redis list named by list_key, which legacy producers
        LPUSH to); fixed at creation."""
        settings = _topic_settings(retention_max_age, retention_max_length, hard_max_length, dedupe_window,
                                   max_payload_bytes, kind=kind, list_key=list_key)
        request = admin_pb2.CreateTopicRequest(name=name, settings=settings.to_proto())
        return admin.Topic.from_proto(await self._call(self._admin.CreateTopic, request))

    async def get_topic(self, name: str) -> admin.Topic:
        """The topic's redq.admin.Topic, with its stats (NOT_FOUND if there is none)."""
        return admin.Topic.from_proto(await self._call(self._admin.GetTopic, admin_pb2.GetTopicRequest(name=name)))

    async def list_topics(self, *, page_size: int = 0, page_token: str = "") -> admin.Page[admin.Topic]:
        """One page of topics (redq.admin.Page of Topic, without stats); page_size 0: the server's default."""
        request = admin_pb2.ListTopicsRequest(page_size=page_size, page_token=page_token)
        return _unary.topics_page(await self._call(self._admin.ListTopics, request))

    async def update_topic(self, name: str, *, retention_max_age: Optional[Seconds] = None,
                           retention_max_length: Optional[int] = None, hard_max_length: Optional[int] = None,
                           dedupe_window: Optional[Seconds] = None,
                           max_payload_bytes: Optional[int] = None) -> admin.Topic:
        """Changes the settings given (not None); returns the updated redq.admin.Topic."""
        settings = _topic_settings(retention_max_age, retention_max_length, hard_max_length, dedupe_window,
                                   max_payload_bytes)
        request = admin_pb2.UpdateTopicRequest(name=name, settings=settings.to_proto())
        return admin.Topic.from_proto(await self._call(self._admin.UpdateTopic, request))

    async def delete_topic(self, name: str) -> None:
        """Deletes the topic, its messages, schedule and subscriptions."""
        await self._call(self._admin.DeleteTopic, admin_pb2.DeleteTopicRequest(name=name))

    # ---- subscriptions

    async def create_subscription(self, topic: str, name: str, *, ack_deadline: Optional[Seconds] = None,
                                  retry_policy: Optional[RetryPolicyArg] = None,
                                  max_delivery_attempts: Optional[int] = None, dead_lettering: Optional[bool] = None,
                                  start: Optional[str] = None, message_ordering: Optional[bool] = None,
                                  max_blocked: Optional[int] = None) -> admin.Subscription:
        """Creates a subscription; returns its redq.admin.Subscription.

        retry_policy: (minimum, maximum) backoff (timedeltas or seconds) or a
        redq.admin.RetryPolicy; start: "earliest" or "latest"."""
        settings = _subscription_settings(ack_deadline, retry_policy, max_delivery_attempts, dead_lettering, start,
                                          message_ordering, max_blocked)
        request = admin_pb2.CreateSubscriptionRequest(topic=topic, name=name, settings=settings.to_proto())
        return admin.Subscription.from_proto(await self._call(self._admin.CreateSubscription, request))

    async def get_subscription(self, topic: str, name: str) -> admin.Subscription:
        """The subscription's redq.admin.Subscription, with its stats."""
        request = admin_pb2.GetSubscriptionRequest(topic=topic, name=name)
        return admin.Subscription.from_proto(await self._call(self._admin.GetSubscription, request))

    async def list_subscriptions(self, topic: str) -> list[admin.Subscription]:
        """The topic's subscriptions: a list of redq.admin.Subscription."""
        response = await self._call(self._admin.ListSubscriptions, admin_pb2.ListSubscriptionsRequest(topic=topic))
        return [admin.Subscription.from_proto(s) for s in response.subscriptions]

    async def update_subscription(self, topic: str, name: str, *, ack_deadline: Optional[Seconds] = None,
                                  retry_policy: Optional[RetryPolicyArg] = None,
                                  max_delivery_attempts: Optional[int] = None, dead_lettering: Optional[bool] = None,
                                  max_blocked: Optional[int] = None) -> admin.Subscription:
        """Changes the settings given (not None); returns the updated redq.admin.Subscription."""
        settings = _subscription_settings(ack_deadline, retry_policy, max_delivery_attempts, dead_lettering,
                                          max_blocked=max_blocked)
        request = admin_pb2.UpdateSubscriptionRequest(topic=topic, name=name, settings=settings.to_proto())
        return admin.Subscription.from_proto(await self._call(self._admin.UpdateSubscription, request))

    async def delete_subscription(self, topic: str, name: str) -> None:
        """Deletes the subscription, its pending deliveries and dead letters."""
        await self._call(self._admin.DeleteSubscription, admin_pb2.DeleteSubscriptionRequest(topic=topic, name=name))

    # ---- dead letters and seeking

    async def list_dead_letters(self, topic: str, subscription: str, *, page_size: int = 0,
                                page_token: str = "") -> admin.Page[admin.DeadLetter]:
        """One page of the subscription's dead letters, oldest first (redq.admin.Page of DeadLetter)."""
        request = admin_pb2.ListDeadLettersRequest(topic=topic, subscription=subscription, page_size=page_size,
                                                   page_token=page_token)
        return _unary.dead_letters_page(await self._call(self._admin.ListDeadLetters, request))

    async def redrive_dead_letters(self, topic: str, subscription: str, dead_letter_ids: Optional[Iterable[str]] = None,
                                   *, max_per_second: int = 0) -> int:
        """Gives dead letters (those named, else all) back for delivery; returns how many."""
        request = admin_pb2.RedriveDeadLettersRequest(topic=topic, subscription=subscription,
                                                      dead_letter_ids=dead_letter_ids or [],
                                                      max_per_second=max_per_second)
        return (await self._call(self._admin.RedriveDeadLetters, request)).redriven

    async def purge_dead_letters(self, topic: str, subscription: str,
                                 dead_letter_ids: Optional[Iterable[str]] = None) -> int:
        """Deletes dead letters (those named, else all); returns how many."""
        request = admin_pb2.PurgeDeadLettersRequest(topic=topic, subscription=subscription,
                                                    dead_letter_ids=dead_letter_ids or [])
        return (await self._call(self._admin.PurgeDeadLetters, request)).purged

    async def seek(self, topic: str, subscription: str, *, time: Optional[Time] = None,
                   message_id: Optional[str] = None) -> None:
        """Moves the subscription to a time (datetime or epoch seconds) or a message id: messages from there
        on are delivered (again), earlier ones skipped."""
        await self._call(self._admin.Seek, _unary.seek_request(topic, subscription, time, message_id))

    # ---- recurring schedules

    async def put_schedule(self, topic: str, name: str, payload: Payload, *, cron: str = "",
                           every: Optional[Seconds] = None, time_zone: str = "",
                           attributes: Optional[Mapping[str, str]] = None, ordering_key: str = "",
                           start_time: Optional[Time] = None, end_time: Optional[Time] = None,
                           paused: bool = False, catch_up: int = 0) -> admin.Schedule:
        """Creates the recurring schedule, or replaces the one of that topic and name; returns its
        redq.admin.Schedule with its next run. Exactly one of cron (5 fields, or 6 with seconds
        first, in time_zone) and every (a timedelta or seconds) must be given."""
        schedule = admin_pb2.Schedule(topic=topic, name=name, cron=cron, time_zone=time_zone, paused=paused,
                                      catch_up=catch_up,
                                      message=pb.PublishMessage(payload=_common.as_payload(payload),
                                                                attributes=dict(attributes or {}),
                                                                ordering_key=ordering_key))
        if every is not None:
            schedule.every.CopyFrom(_common.to_duration(every, "every"))
        if start_time is not None:
            schedule.start_time.CopyFrom(_common.to_timestamp(start_time, "start_time"))
        if end_time is not None:
            schedule.end_time.CopyFrom(_common.to_timestamp(end_time, "end_time"))
        request = admin_pb2.PutScheduleRequest(schedule=schedule)
        return admin.Schedule.from_proto(await self._call(self._admin.PutSchedule, request))

    async def get_schedule(self, topic: str, name: str) -> admin.Schedule:
        """The schedule's redq.admin.Schedule (NOT_FOUND if there is none)."""
        request = admin_pb2.GetScheduleRequest(topic=topic, name=name)
        return admin.Schedule.from_proto(await self._call(self._admin.GetSchedule, request))

    async def list_schedules(self, topic: str, *, page_size: int = 0,
                             page_token: str = "") -> admin.Page[admin.Schedule]:
        """One page of the topic's schedules in name order (redq.admin.Page of Schedule)."""
        request = admin_pb2.ListSchedulesRequest(topic=topic, page_size=page_size, page_token=page_token)
        return _unary.schedules_page(await self._call(self._admin.ListSchedules, request))

    async def delete_schedule(self, topic: str, name: str) -> None:
        """Deletes the schedule (NOT_FOUND if there is none)."""
        await self._call(self._admin.DeleteSchedule, admin_pb2.DeleteScheduleRequest(topic=topic, name=name))

    async def close(self) -> None:
        """Closes the channel, if this Client made it."""
        if self._owns_channel:
            await self._channel.close()


# redq.admin's settings hold what the server reports (timedeltas, a RetryPolicy); their
# to_proto() also takes what the Client's methods take (seconds, a (minimum, maximum) pair).

def _topic_settings(retention_max_age: Optional[Seconds], retention_max_length: Optional[int],
                    hard_max_length: Optional[int], dedupe_window: Optional[Seconds],
                    max_payload_bytes: Optional[int], *, kind: Optional[str] = None,
                    list_key: Optional[str] = None) -> admin.TopicSettings:
    settings: Any = admin.TopicSettings
    return settings(retention_max_age, retention_max_length, hard_max_length, dedupe_window, max_payload_bytes,
                    kind=kind, list_key=list_key)


def _subscription_settings(ack_deadline: Optional[Seconds], retry_policy: Optional[RetryPolicyArg],
                           max_delivery_attempts: Optional[int], dead_lettering: Optional[bool],
                           start: Optional[str] = None, message_ordering: Optional[bool] = None,
                           max_blocked: Optional[int] = None) -> admin.SubscriptionSettings:
    settings: Any = admin.SubscriptionSettings
    return settings(ack_deadline, retry_policy, max_delivery_attempts, dead_lettering, start, message_ordering,
                    max_blocked)
