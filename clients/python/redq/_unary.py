"""The unary calls both Clients make (schedule, cancel, reschedule) and the admin proxy."""

import collections

import grpc
from google.protobuf import message_factory

from . import _common
from ._common import RedqError
from ._proto import admin_pb2
from ._proto import queue_pb2 as pb

ScheduleResult = collections.namedtuple("ScheduleResult", "message_id deliver_at duplicate")
ScheduleResult.__doc__ = "What schedule() returns: the id (for cancel/reschedule), due time (UTC datetime), duplicate."
RescheduleResult = collections.namedtuple("RescheduleResult", "rescheduled deliver_at")
RescheduleResult.__doc__ = "What reschedule() returns: rescheduled is False when the message was already delivered, \
cancelled or unknown."


def schedule_request(topic, payload, delay, deliver_at, attributes, ordering_key, dedupe_id):
    if (delay is None) == (deliver_at is None):
        raise ValueError("schedule: give exactly one of delay and deliver_at")
    message = pb.PublishMessage(payload=_common.as_payload(payload), attributes=attributes or {},
                                ordering_key=ordering_key, dedupe_id=dedupe_id)
    return pb.ScheduleDelayedRequest(topic=topic, message=message, **_common.timing_fields(delay, deliver_at))


def schedule_result(response):
    return ScheduleResult(response.message_id, _common.from_timestamp(response.deliver_at), response.duplicate)


def reschedule_request(topic, message_id, delay, deliver_at):
    if (delay is None) == (deliver_at is None):
        raise ValueError("reschedule: give exactly one of delay and deliver_at")
    return pb.RescheduleDelayedRequest(topic=topic, message_id=message_id, **_common.timing_fields(delay, deliver_at))


def reschedule_result(response):
    return RescheduleResult(response.rescheduled, _common.from_timestamp(response.deliver_at))


_ADMIN_REQUESTS = {
    method.name: message_factory.GetMessageClass(method.input_type)
    for method in admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods
}


class AdminProxy:
    """AdminService through its generated stub, with RedqError for failures.

    Each method takes the request message or its fields as keywords, e.g.
    ``admin.GetTopic(name="orders")`` or ``admin.GetTopic(admin_pb2.GetTopicRequest(name="orders"))``,
    and returns the generated response message (awaitable on the asyncio Client).
    """

    def __init__(self, stub, timeout, is_async):
        self._stub, self._timeout, self._is_async = stub, timeout, is_async

    def __dir__(self):
        return sorted(_ADMIN_REQUESTS)

    def __getattr__(self, name):
        if name not in _ADMIN_REQUESTS:
            raise AttributeError(f"AdminService has no method {name}")
        method, request_class, default_timeout = getattr(self._stub, name), _ADMIN_REQUESTS[name], self._timeout

        if self._is_async:
            async def call(request=None, /, *, timeout=None, **fields):
                try:
                    return await method(request or request_class(**fields), timeout=timeout or default_timeout)
                except grpc.RpcError as err:
                    raise RedqError.from_rpc_error(err) from None
        else:
            def call(request=None, /, *, timeout=None, **fields):
                try:
                    return method(request or request_class(**fields), timeout=timeout or default_timeout)
                except grpc.RpcError as err:
                    raise RedqError.from_rpc_error(err) from None
        call.__name__ = name
        return call
