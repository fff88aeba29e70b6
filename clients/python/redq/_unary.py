"""The unary calls of the Client (schedule, cancel, reschedule, the AdminService's
snake_case methods) as requests and results, and the raw stubs' proxy."""

from __future__ import annotations

import datetime
from typing import Any, Callable, NamedTuple, Optional

import grpc
from google.protobuf import message_factory

from . import _common, admin
from ._common import RedqError
from .v1 import admin_pb2
from .v1 import queue_pb2 as pb


class ScheduleResult(NamedTuple):
    """What schedule() returns: the id (for cancel/reschedule), due time (UTC datetime), duplicate."""

    message_id: str
    deliver_at: Optional[datetime.datetime]
    duplicate: bool


class RescheduleResult(NamedTuple):
    """What reschedule() returns: rescheduled is False when the message was already delivered,
    cancelled or unknown."""

    rescheduled: bool
    deliver_at: Optional[datetime.datetime]


def schedule_request(topic, payload, delay, deliver_at, attributes, ordering_key, dedupe_id):
    if (delay is None) == (deliver_at is None):
        raise ValueError("schedule: give exactly one of delay and deliver_at")
    message = pb.PublishMessage(payload=_common.as_payload(payload), attributes=attributes or {},
                                ordering_key=ordering_key, dedupe_id=dedupe_id)
    return pb.ScheduleDelayedRequest(topic=topic, message=message, **_common.timing_fields(delay, deliver_at))


def schedule_result(response: Any) -> ScheduleResult:
    return ScheduleResult(response.message_id, _common.from_timestamp(response.deliver_at), response.duplicate)


def reschedule_request(topic, message_id, delay, deliver_at):
    if (delay is None) == (deliver_at is None):
        raise ValueError("reschedule: give exactly one of delay and deliver_at")
    return pb.RescheduleDelayedRequest(topic=topic, message_id=message_id, **_common.timing_fields(delay, deliver_at))


def reschedule_result(response: Any) -> RescheduleResult:
    return RescheduleResult(response.rescheduled, _common.from_timestamp(response.deliver_at))


def seek_request(topic, subscription, time, message_id):
    if (time is None) == (message_id is None):
        raise ValueError("seek: give exactly one of time and message_id")
    if time is not None:
        return admin_pb2.SeekRequest(topic=topic, subscription=subscription, time=_common.to_timestamp(time))
    return admin_pb2.SeekRequest(topic=topic, subscription=subscription, message_id=message_id)


def topics_page(response: Any) -> admin.Page[admin.Topic]:
    return admin.Page([admin.Topic.from_proto(t) for t in response.topics], response.next_page_token)


def schedules_page(response: Any) -> admin.Page[admin.Schedule]:
    return admin.Page([admin.Schedule.from_proto(s) for s in response.schedules], response.next_page_token)


def dead_letters_page(response: Any) -> admin.Page[admin.DeadLetter]:
    return admin.Page([admin.DeadLetter.from_proto(d) for d in response.dead_letters], response.next_page_token)


class StubProxy:
    """A service's generated stub with RedqError for failures (Client.admin_stub, Client.queue_stub).

    Each unary method takes the request message or its fields as keywords,
    e.g. ``admin_stub.GetTopic(name="orders")`` or
    ``admin_stub.GetTopic(admin_pb2.GetTopicRequest(name="orders"))``, and
    returns the generated response message (awaitable on the asyncio
    Client). An unknown field is a TypeError.
    """

    def __init__(self, stub: Any, service: Any, timeout: Optional[float],
                 run: Optional[Callable[[Any], Any]] = None) -> None:
        self._stub, self._timeout, self._run = stub, timeout, run
        self._requests = {method.name: message_factory.GetMessageClass(method.input_type)
                          for method in service.methods if not method.client_streaming and not method.server_streaming}

    def __dir__(self) -> list[str]:
        return sorted(self._requests)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name not in self._requests:
            raise AttributeError(f"no unary method {name}")
        method, request_class, default_timeout = getattr(self._stub, name), self._requests[name], self._timeout
        known = request_class.DESCRIPTOR.fields_by_name

        async def call(request=None, /, *, timeout=None, **fields):
            if request is None:
                _common.check_options(fields, known, f"{name}()")
                request = request_class(**fields)
            try:
                return await method(request, timeout=timeout or default_timeout)
            except grpc.RpcError as err:
                raise RedqError.from_rpc_error(err) from None
        if self._run is not None:
            run = self._run

            def blocking(request=None, /, *, timeout=None, **fields):
                return run(call(request, timeout=timeout, **fields))
            blocking.__name__ = name
            return blocking
        call.__name__ = name
        return call
