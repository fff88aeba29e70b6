"""redq's synchronous API: the asyncio Publisher and Subscriber on a background loop thread.

One event-loop thread per process ("redq-loop") runs every sync Publisher's
and Subscriber's streams. Calls from other threads reach it through a deque
and a single call_soon_threadsafe per wake-up (not one per message), so that
a thread publishing in a tight loop hands over its messages in batches.
Handlers of a sync Subscriber run in its own pool of threads. The Client is
plain synchronous gRPC: its calls are unary, nothing to gain from the loop.
"""

import asyncio
import atexit
import concurrent.futures
import queue
import threading
import time
from collections import deque

import grpc

from . import _security, _unary
from ._common import RedqError
from ._proto import admin_pb2_grpc, queue_pb2_grpc
from ._proto import queue_pb2 as pb
from .aio import _publisher, _subscriber


class _LoopThread:
    """The process's background event loop, started on first use."""

    _instance = None
    _lock = threading.Lock()

    @classmethod
    def get(cls):
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(ready,), name="redq-loop", daemon=True)
        self.thread.start()
        ready.wait()
        atexit.register(self._stop)

    def _main(self, ready):
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def _stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(2.0)

    def run(self, coroutine, timeout=None):
        """Runs a coroutine on the loop and waits for its result."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("redq: a blocking call of the sync API made on its own loop thread")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"redq: no result within {timeout} s") from None


class _Inbox:
    """Calls handed from any thread to the loop thread, run there in order, in batches."""

    def __init__(self, loop):
        self._loop = loop
        self._items = deque()
        self._scheduled = False

    def put(self, function, *args):
        self._items.append((function, args))
        # Unset only by drain(), just before it empties the deque: an item
        # appended before this check is seen by a drain that is still to run.
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon_threadsafe(self.drain)

    def drain(self):
        """On the loop thread: runs everything put so far."""
        self._scheduled = False
        items = self._items
        while items:
            function, args = items.popleft()
            function(*args)


class Publisher:
    """Publishes with batching over a PublishStream; publish() returns a concurrent.futures.Future.

    Thread-safe. Options as redq.aio.Publisher (target, max_batch_messages,
    max_batch_bytes, linger, max_in_flight, retry_timeout, auto_dedupe,
    channel_options, token, tls, tls_cert, tls_key, tls_server_name).
    """

    def __init__(self, target=None, **options):
        self._thread = _LoopThread.get()

        async def make():
            publisher = _publisher.Publisher(target, **options)
            publisher._bind_loop()
            return publisher
        self._core = self._thread.run(make())
        self._inbox = _Inbox(self._thread.loop)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def stats(self):
        return self._core.stats

    def publish(self, topic, payload, *, attributes=None, ordering_key="", dedupe_id=None, delay=None,
                deliver_at=None):
        """Queues one message; returns a concurrent.futures.Future of its id (RedqError on failure)."""
        future = concurrent.futures.Future()
        core = self._core
        self._inbox.put(core._add, topic, core._entry(payload, attributes, ordering_key, dedupe_id, delay, deliver_at,
                                                      future, 0))
        return future

    def publish_batch(self, topic, payloads, *, attributes=None, ordering_key="", delay=None, deliver_at=None):
        """Queues many messages; returns one Future of their ids, in order."""
        future = concurrent.futures.Future()
        entries = self._core._batch_entries(payloads, attributes, ordering_key, delay, deliver_at, future)
        if entries:
            self._inbox.put(self._core._add_many, topic, entries)
        return future

    def flush(self, timeout=None):
        """Blocks until every message published before this call is answered."""
        async def flush():
            self._inbox.drain()
            await self._core.flush()
        self._thread.run(flush(), timeout)

    def close(self, timeout=None):
        """Flushes and ends the stream."""
        async def close():
            self._inbox.drain()
            await self._core.close()
        self._thread.run(close(), timeout)


class _ThreadedSubscription(_subscriber.Subscription):
    """The asyncio Subscription with its handlers in threads instead of tasks."""

    def _start_handlers(self):
        self._queue = queue.SimpleQueue()
        self._loop_thread = threading.get_ident()
        self._inbox = _Inbox(self._loop)
        self._settle_here = super()._settle
        self._threads = [threading.Thread(target=self._handler_thread, name=f"redq-handler-{i}", daemon=True)
                         for i in range(self._concurrency)]
        for thread in self._threads:
            thread.start()

    def _handler_thread(self):
        handler, messages = self._handler, self._queue
        while True:
            message = messages.get()
            if message is None:
                return
            try:
                handler(message)
            except Exception:  # noqa: BLE001 (a failing handler nacks its message)
                self._handler_failed(message)
            else:
                message.ack()

    def _deliver(self, messages):
        put = self._queue.put
        for message in messages:
            put(message)

    def _take_undelivered(self):
        undelivered = []
        while True:
            try:
                message = self._queue.get_nowait()
            except queue.Empty:
                return undelivered
            if message is not None:
                undelivered.append(message)

    def _wake_idle(self):
        for _ in self._threads:
            self._queue.put(None)  # one stop sign per thread, behind anything queued

    async def _wait_handlers(self, timeout):
        self._wake_idle()

        def join():
            deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
            for thread in self._threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        await self._loop.run_in_executor(None, join)
        self._inbox.drain()

    def _settle(self, ack_id, kind, delay):
        if threading.get_ident() == self._loop_thread:
            super()._settle(ack_id, kind, delay)
        else:
            self._inbox.put(self._settle_here, ack_id, kind, delay)


class Subscription:
    """A running subscription of the sync Subscriber."""

    def __init__(self, core, thread):
        self._core, self._thread = core, thread

    @property
    def stats(self):
        return self._core.stats

    @property
    def closed(self):
        return self._core.closed

    def set_flow_control(self, max_outstanding=0, max_outstanding_bytes=0):
        self._thread.loop.call_soon_threadsafe(self._core.set_flow_control, max_outstanding, max_outstanding_bytes)

    def wait(self, timeout=None):
        """Blocks until the subscription is closed; raises RedqError if it failed (TimeoutError after timeout)."""
        self._thread.run(self._core.wait(), timeout)

    def close(self, timeout=30.0):
        """Stops taking messages, waits up to timeout for running handlers, sends their acks, ends the stream.
        Not from inside a handler (it would wait for itself)."""
        self._thread.run(self._core.close(timeout))


class Subscriber:
    """Creates subscriptions whose handlers run in a pool of threads.

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051).
    token, tls, tls_cert, tls_key, tls_server_name: as redq.aio.Publisher.
    """

    def __init__(self, target=None, *, channel_options=None, token=None, tls=None, tls_cert=None, tls_key=None,
                 tls_server_name=None):
        self._thread = _LoopThread.get()

        async def make():
            return _subscriber.Subscriber(target, channel_options=channel_options, token=token, tls=tls,
                                          tls_cert=tls_cert, tls_key=tls_key, tls_server_name=tls_server_name)
        self._core = self._thread.run(make())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def subscribe(self, topic, subscription, handler, *, max_outstanding=100, concurrency=10, ack_deadline=30.0,
                  ack_linger=0.010, consumer="", start=None, retry_policy=None, max_delivery_attempts=0,
                  max_outstanding_bytes=0, message_ordering=False):
        """Starts receiving; returns the running Subscription.

        handler(message) runs in one of `concurrency` threads; returning acks
        the message, raising nacks it (unless it called ack()/nack() itself).
        Other options as redq.aio.Subscriber.subscribe.
        """
        request = _subscriber.subscribe_request(
            topic, subscription, max_outstanding=max_outstanding, ack_deadline=ack_deadline, consumer=consumer,
            start=start, retry_policy=retry_policy, max_delivery_attempts=max_delivery_attempts,
            max_outstanding_bytes=max_outstanding_bytes, message_ordering=message_ordering)
        core = self._core

        async def start():
            sub = _ThreadedSubscription(core._stub, request, handler, max(1, concurrency), asyncio.get_running_loop(),
                                        ack_linger)
            core._subscriptions.append(sub)
            return sub
        return Subscription(self._thread.run(start()), self._thread)

    def close(self, timeout=30.0):
        """Closes every subscription gracefully, then the channel."""
        self._thread.run(self._core.close(timeout))


class Client:
    """Unary calls of redq (schedule, cancel, reschedule) and the AdminService, blocking.

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051), or
    channel= an existing grpc channel. timeout: seconds per call. `admin` is
    the AdminService (see AdminProxy), `queue` the raw QueueService stub.
    token, tls, tls_cert, tls_key, tls_server_name: as redq.aio.Publisher.
    """

    def __init__(self, target=None, *, channel=None, timeout=10.0, channel_options=None, token=None, tls=None,
                 tls_cert=None, tls_key=None, tls_server_name=None):
        self._owns_channel = channel is None
        self._channel = _security.open_channel(target, channel, is_async=False, channel_options=channel_options,
                                               token=token, tls=tls, tls_cert=tls_cert, tls_key=tls_key,
                                               tls_server_name=tls_server_name)
        self._timeout = timeout
        self.queue = queue_pb2_grpc.QueueServiceStub(self._channel)
        self.admin = _unary.AdminProxy(admin_pb2_grpc.AdminServiceStub(self._channel), timeout, is_async=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self._timeout)
        except grpc.RpcError as err:
            raise RedqError.from_rpc_error(err) from None

    def schedule(self, topic, payload, *, delay=None, deliver_at=None, attributes=None, ordering_key="",
                 dedupe_id=""):
        """Schedules one message after delay (seconds, timedelta) or at deliver_at (datetime, epoch seconds)."""
        request = _unary.schedule_request(topic, payload, delay, deliver_at, attributes, ordering_key, dedupe_id)
        return _unary.schedule_result(self._call(self.queue.ScheduleDelayed, request))

    def cancel(self, topic, message_id):
        """Cancels a scheduled message; False if it was already delivered, cancelled or unknown."""
        request = pb.CancelScheduledRequest(topic=topic, message_id=message_id)
        return self._call(self.queue.CancelScheduled, request).cancelled

    def reschedule(self, topic, message_id, *, delay=None, deliver_at=None):
        """Moves a scheduled message to a new time; returns RescheduleResult(rescheduled, deliver_at)."""
        request = _unary.reschedule_request(topic, message_id, delay, deliver_at)
        return _unary.reschedule_result(self._call(self.queue.RescheduleDelayed, request))

    def close(self):
        if self._owns_channel:
            self._channel.close()
