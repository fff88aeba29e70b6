"""The asyncio Client: unary calls (schedule, cancel, reschedule) and the AdminService."""

import grpc

from .. import _security, _unary
from .._common import RedqError
from .._proto import admin_pb2_grpc, queue_pb2_grpc
from .._proto import queue_pb2 as pb


class Client:
    """Unary calls of redq, awaitable.

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051), or
    channel= an existing grpc.aio channel. timeout: seconds per call.
    token, tls, tls_cert, tls_key, tls_server_name: see Publisher.
    `admin` is the AdminService (see AdminProxy), `queue` the raw
    QueueService stub.
    """

    def __init__(self, target=None, *, channel=None, timeout=10.0, channel_options=None, token=None, tls=None,
                 tls_cert=None, tls_key=None, tls_server_name=None):
        self._owns_channel = channel is None
        self._channel = _security.open_channel(target, channel, is_async=True, channel_options=channel_options,
                                               token=token, tls=tls, tls_cert=tls_cert, tls_key=tls_key,
                                               tls_server_name=tls_server_name)
        self._timeout = timeout
        self.queue = queue_pb2_grpc.QueueServiceStub(self._channel)
        self.admin = _unary.AdminProxy(admin_pb2_grpc.AdminServiceStub(self._channel), timeout, is_async=True)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def _call(self, method, request):
        try:
            return await method(request, timeout=self._timeout)
        except grpc.RpcError as err:
            raise RedqError.from_rpc_error(err) from None

    async def schedule(self, topic, payload, *, delay=None, deliver_at=None, attributes=None, ordering_key="",
                       dedupe_id=""):
        """Schedules one message after delay (seconds, timedelta) or at deliver_at (datetime, epoch seconds)."""
        request = _unary.schedule_request(topic, payload, delay, deliver_at, attributes, ordering_key, dedupe_id)
        return _unary.schedule_result(await self._call(self.queue.ScheduleDelayed, request))

    async def cancel(self, topic, message_id):
        """Cancels a scheduled message; False if it was already delivered, cancelled or unknown."""
        request = pb.CancelScheduledRequest(topic=topic, message_id=message_id)
        return (await self._call(self.queue.CancelScheduled, request)).cancelled

    async def reschedule(self, topic, message_id, *, delay=None, deliver_at=None):
        """Moves a scheduled message to a new time; returns RescheduleResult(rescheduled, deliver_at)."""
        request = _unary.reschedule_request(topic, message_id, delay, deliver_at)
        return _unary.reschedule_result(await self._call(self.queue.RescheduleDelayed, request))

    async def close(self):
        if self._owns_channel:
            await self._channel.close()
