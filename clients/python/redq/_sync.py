"""redq's synchronous API: the asyncio Publisher and Subscriber on a background loop thread.

One event-loop thread per process ("redq-loop") runs every sync Publisher's
and Subscriber's streams, and the sync Client's calls (so that one
Connection, a grpc.aio channel on that loop, can serve all three). Calls
from other threads reach it through a deque and a single
call_soon_threadsafe per wake-up (not one per message), so that a thread
publishing in a tight loop hands over its messages in batches. Handlers of a
sync Subscriber run in its own pool of threads.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import inspect
import queue
import threading
import time
from collections import deque
from typing import (TYPE_CHECKING, Any, Callable, Concatenate, Coroutine, Iterable, Literal, Mapping, Optional,
                    ParamSpec, Tuple, TypeVar)

import grpc

from . import _common, _security, _unary
from ._common import ChannelOptions, Payload, Seconds, Time
from ._security import Pem, Tls
from .aio import _client, _publisher, _subscriber

if TYPE_CHECKING:
    from typing_extensions import Unpack

_P = ParamSpec("_P")
_R = TypeVar("_R")


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

    def run(self, coroutine: Coroutine[Any, Any, _R], timeout: Optional[float] = None) -> _R:
        """Runs a coroutine on the loop and waits for its result."""
        if threading.current_thread() is self.thread:
            coroutine.close()
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


class Connection:
    """One channel to redq, made with redq's options (receive size, token, TLS), for
    sync Publishers, Subscribers and Clients to share: pass it as their `channel=`.
    They do not close it; close() does (or leaving `with`). Made by redq.connect().
    `channel` is the grpc.aio channel itself, which lives on redq's loop thread."""

    def __init__(self, core: _security.Connection, thread: _LoopThread) -> None:
        self._core, self._thread = core, thread
        self.channel, self.target = core.channel, core.target

    def __repr__(self) -> str:
        return f"Connection({self.target!r})"

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._thread.run(self._core.close())


def connect(target: Optional[str] = None, *, channel_options: Optional[ChannelOptions] = None,
            token: Optional[str] = None, tls: Tls = None, tls_cert: Optional[Pem] = None,
            tls_key: Optional[Pem] = None, tls_server_name: Optional[str] = None) -> Connection:
    """One channel to redq for sync Publishers, Subscribers and Clients to share.

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051); the
    options are those of every entry point (see redq.aio.Publisher);
    channel_options: extra gRPC channel options. Returns a Connection.
    """
    thread = _LoopThread.get()

    async def make() -> _security.Connection:
        return _security.connect(target, channel_options=channel_options, token=token, tls=tls, tls_cert=tls_cert,
                                 tls_key=tls_key, tls_server_name=tls_server_name)
    return Connection(thread.run(make()), thread)


def _core_channel(channel):
    """The channel= of a sync entry point, as its asyncio core takes it."""
    if channel is None or isinstance(channel, _security.Connection):
        return channel
    if isinstance(channel, Connection):
        return channel._core
    raise TypeError(f"redq: channel= of the sync API is a redq.Connection (redq.connect()), "
                    f"not {type(channel).__name__}")


class _ThreadFlowControl(_publisher._FlowControl):
    """The flow control of a sync Publisher: admitted in the publishing threads, released on the loop thread."""

    def __init__(self, flow, loop_thread):
        self.__dict__.update(flow.__dict__)
        self._condition = threading.Condition()
        self._loop_thread = loop_thread
        self._closed = False

    def admit_blocking(self, n, size):
        """Counts messages in, waiting for room ("block") or raising FlowControlError; returns whether it waited."""
        waited = False
        with self._condition:
            if not self.fits(n, size):
                if not self.block:
                    raise self.error(n, size)
                if threading.current_thread() is self._loop_thread:
                    # A done-callback publishing: blocking here would stop the answers that free room.
                    raise self.error(n, size)
                waited = True
                while not self.fits(n, size):
                    if self._closed:
                        raise RuntimeError("redq: the publisher is closed")
                    self._condition.wait()
            self.messages += n
            self.bytes += size
        return waited

    def release(self, n, size):
        with self._condition:
            self.messages -= n
            self.bytes -= size
            self._condition.notify_all()

    def fail_waiters(self, error):
        with self._condition:
            self._closed = True
            self._condition.notify_all()


_PUBLISHER_OPTIONS = [name for name, p in inspect.signature(_publisher.Publisher).parameters.items()
                      if p.kind is inspect.Parameter.KEYWORD_ONLY]


class PublisherOptions(_publisher.PublisherOptions, total=False):
    """The keyword options of the sync Publisher: redq.aio.Publisher's, with channel= a redq.Connection."""

    channel: Optional[Connection]


class Publisher:
    """Publishes with batching over a PublishStream; publish() returns a concurrent.futures.Future.

    Thread-safe. Options as redq.aio.Publisher (target, channel — a
    redq.Connection here —, max_batch_messages, max_batch_bytes, linger,
    max_in_flight, timeout, max_outstanding_messages, max_outstanding_bytes,
    limit_exceeded, auto_dedupe, channel_options, token, tls, tls_cert,
    tls_key, tls_server_name). With limit_exceeded="block" (the default),
    publish() and publish_batch() wait in the calling thread while the
    flow-control limits are reached (from redq's loop thread, e.g. in a
    future's done-callback, they raise FlowControlError instead).
    """

    def __init__(self, target: Optional[str] = None, **options: Unpack[PublisherOptions]) -> None:
        _common.check_options(options, _PUBLISHER_OPTIONS, "Publisher()")
        core_options: dict[str, Any] = dict(options, channel=_core_channel(options.get("channel")))
        self._thread = _LoopThread.get()

        async def make() -> _publisher.Publisher:
            publisher = _publisher.Publisher(target, **core_options)
            publisher._bind_loop()
            return publisher
        self._core = self._thread.run(make())
        self._flow = self._core._flow = _ThreadFlowControl(self._core._flow, self._thread.thread)
        self._inbox = _Inbox(self._thread.loop)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stats(self) -> _publisher.PublisherStats:
        return self._core.stats

    def publish(self, topic: str, payload: Payload, *, attributes: Optional[Mapping[str, str]] = None,
                ordering_key: str = "", dedupe_id: Optional[str] = None, delay: Optional[Seconds] = None,
                deliver_at: Optional[Time] = None) -> concurrent.futures.Future[str]:
        """Queues one message; returns a concurrent.futures.Future of its id (RedqError on failure).

        payload: bytes, bytearray or memoryview (a TypeError otherwise). At a
        flow-control limit, waits for room or raises FlowControlError (see
        limit_exceeded)."""
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        core = self._core
        entry = core._entry(payload, attributes, ordering_key, dedupe_id, delay, deliver_at, future, 0)
        if self._flow.admit_blocking(1, entry[_publisher._SIZE]):
            entry = self._requeued(entry)
        self._inbox.put(core._add, topic, entry)
        return future

    def publish_batch(self, topic: str, payloads: Iterable[Payload], *, attributes: Optional[Mapping[str, str]] = None,
                      ordering_key: str = "", delay: Optional[Seconds] = None,
                      deliver_at: Optional[Time] = None) -> concurrent.futures.Future[list[str]]:
        """Queues many messages; returns one Future of their ids, in order (waits for room as publish())."""
        future: concurrent.futures.Future[list[str]] = concurrent.futures.Future()
        entries = self._core._batch_entries(payloads, attributes, ordering_key, delay, deliver_at, future)
        if entries:
            if self._flow.admit_blocking(len(entries), sum(e[_publisher._SIZE] for e in entries)):
                entries = [self._requeued(e) for e in entries]
            self._inbox.put(self._core._add_many, topic, entries)
        return future

    def _requeued(self, entry):
        """The entry with the epoch and deadline of now (it may have waited for room)."""
        return entry[:_publisher._EPOCH] + (self._core._epoch, entry[_publisher._SIZE], self._core._deadline())

    def flush(self, timeout: Optional[float] = None) -> None:
        """Blocks until every message published before this call is answered."""
        async def flush() -> None:
            self._inbox.drain()
            await self._core.flush()
        self._thread.run(flush(), timeout)

    def close(self, timeout: Optional[float] = None) -> None:
        """Flushes and ends the stream; after timeout seconds (None: each message's own
        timeout) what is unanswered fails with DEADLINE_EXCEEDED."""
        async def close() -> None:
            self._inbox.drain()
            await self._core.close(timeout)
        self._flow.fail_waiters(None)
        self._thread.run(close())


class Message(_subscriber._Message["concurrent.futures.Future[None]"]):
    """A delivered message of the sync Subscriber: ack() and nack() return a
    concurrent.futures.Future, settled when the server applied them.

    Call ack() or nack(delay) once; a handler that returns acks implicitly
    and one that raises nacks. Attributes: id, topic, payload (bytes),
    attributes (dict), ordering_key, publish_time and deliver_at (UTC
    datetimes), delivery_attempt (1 first), ack_id ("" on EPHEMERAL topics,
    whose messages are not acked: ack() and nack() do nothing there).
    """

    __slots__ = ()


Handler = Callable[[Message], object]
"""A handler of the sync Subscriber: a function of a Message, run in the subscription's threads."""


class _ThreadedSubscription(_subscriber.Subscription):
    """The asyncio Subscription with its handlers in threads instead of tasks."""

    _message_class = Message

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
                message._settle_quietly(_subscriber._ACK)

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

    def _settle(self, ack_id, kind, delay, observed, future=None):
        """As the asyncio one, from any thread; the future is a concurrent.futures.Future."""
        if observed and future is None:
            future = concurrent.futures.Future()
        if threading.get_ident() == self._loop_thread:
            self._settle_here(ack_id, kind, delay, observed, future)
        else:
            self._inbox.put(self._settle_here, ack_id, kind, delay, observed, future)
        return future

    def _already_settled(self, ack_id):
        future = concurrent.futures.Future()
        future.set_exception(_common.AckError(grpc.StatusCode.FAILED_PRECONDITION, "the message was settled already",
                                              ack_id))
        return future

    def _nothing_to_settle(self):
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        future.set_result(None)
        return future


class Subscription:
    """A running subscription of the sync Subscriber."""

    def __init__(self, core: _ThreadedSubscription, thread: _LoopThread) -> None:
        self._core, self._thread = core, thread

    @property
    def stats(self) -> _subscriber.SubscriptionStats:
        return self._core.stats

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def dropped(self) -> int:
        """EPHEMERAL topics: messages the server dropped for this subscription, in all, because it fell behind."""
        return self._core.dropped

    def set_flow_control(self, max_outstanding: int = 0, max_outstanding_bytes: int = 0) -> None:
        """Changes the stream's flow control (0 leaves a value as it is)."""
        self._thread.loop.call_soon_threadsafe(self._core.set_flow_control, max_outstanding, max_outstanding_bytes)

    def ready(self, timeout: Optional[float] = None) -> None:
        """Blocks until the subscription's stream is open; raises the RedqError it was refused with
        (TimeoutError after timeout). A failure is reported once: see redq.aio.Subscription.ready."""
        self._thread.run(self._core.ready(), timeout)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Blocks until the subscription is closed; raises RedqError if it failed (TimeoutError after timeout)."""
        self._thread.run(self._core.wait(), timeout)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Sends the acks and nacks made so far and blocks until the server confirmed it applied
        them and every earlier one (see redq.aio.Subscription.flush)."""
        async def flush() -> None:
            self._core._inbox.drain()  # settlements handed over by handler threads
            await self._core.flush()
        self._thread.run(flush(), timeout)

    def close(self, timeout: Optional[float] = 30.0) -> None:
        """Stops taking messages, waits up to timeout for running handlers, sends their acks, ends the stream.
        Not from inside a handler (it would wait for itself)."""
        self._thread.run(self._core.close(timeout))


class Subscriber:
    """Creates subscriptions whose handlers run in a pool of threads.

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051), or
    channel= a redq.Connection (redq.connect()), not closed by close().
    token, tls, tls_cert, tls_key, tls_server_name: as redq.aio.Publisher.
    """

    def __init__(self, target: Optional[str] = None, *, channel: Optional[Connection] = None,
                 channel_options: Optional[ChannelOptions] = None, token: Optional[str] = None, tls: Tls = None,
                 tls_cert: Optional[Pem] = None, tls_key: Optional[Pem] = None,
                 tls_server_name: Optional[str] = None) -> None:
        self._thread = _LoopThread.get()
        core_channel = _core_channel(channel)

        async def make() -> _subscriber.Subscriber:
            return _subscriber.Subscriber(target, channel=core_channel, channel_options=channel_options, token=token,
                                          tls=tls, tls_cert=tls_cert, tls_key=tls_key, tls_server_name=tls_server_name)
        self._core = self._thread.run(make())

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def subscribe(self, topic: Optional[str], subscription: str, handler: Handler, *, max_outstanding: int = 100,
                  concurrency: int = 10, ack_deadline: Seconds = 30.0, ack_linger: float = 0.010, consumer: str = "",
                  start: Optional[Literal["earliest", "latest"]] = None,
                  retry_policy: Optional[Tuple[Seconds, Seconds]] = None, max_delivery_attempts: int = 0,
                  max_outstanding_bytes: int = 0, message_ordering: bool = False,
                  pattern: Optional[str] = None) -> Subscription:
        """Starts receiving; returns the running Subscription.

        handler(message) runs in one of `concurrency` threads; returning acks
        the message, raising nacks it (unless it called ack()/nack() itself).
        pattern: instead of a topic (pass None), a NATS-style pattern of
        EPHEMERAL topics (a ValueError with both or neither). Other options
        as redq.aio.Subscriber.subscribe.
        """
        request = _subscriber.subscribe_request(
            topic, subscription, max_outstanding=max_outstanding, ack_deadline=ack_deadline, consumer=consumer,
            start=start, retry_policy=retry_policy, max_delivery_attempts=max_delivery_attempts,
            max_outstanding_bytes=max_outstanding_bytes, message_ordering=message_ordering, pattern=pattern)
        core = self._core

        async def make() -> _ThreadedSubscription:
            sub = _ThreadedSubscription(core._stub, request, handler, max(1, concurrency), asyncio.get_running_loop(),
                                        ack_linger)
            core._subscriptions.append(sub)
            return sub
        return Subscription(self._thread.run(make()), self._thread)

    def close(self, timeout: Optional[float] = 30.0) -> None:
        """Closes every subscription gracefully, then the channel."""
        self._thread.run(self._core.close(timeout))


def _blocking(method: Callable[Concatenate[_client.Client, _P], Coroutine[Any, Any, _R]]
              ) -> Callable[Concatenate[Client, _P], _R]:
    """A method of the sync Client: the asyncio Client's, run on redq's loop thread and waited for."""
    def call(self: Client, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self._thread.run(method(self._core, *args, **kwargs))
    functools.update_wrapper(call, method)
    return call


class Client:
    """Unary calls of redq (schedule, cancel, reschedule) and the AdminService, blocking.

    The methods of redq.aio.Client, each run on redq's loop thread and
    waited for. target: "host:port" (default $REDQ_ADDR, else
    127.0.0.1:50051), or channel= a redq.Connection (redq.connect()), not
    closed by close(). timeout: seconds per call. token, tls, tls_cert,
    tls_key, tls_server_name: as redq.aio.Publisher. `admin_stub` and
    `queue_stub` are the raw generated stubs' unary methods (see
    redq.aio.Client).
    """

    def __init__(self, target: Optional[str] = None, *, channel: Optional[Connection] = None,
                 timeout: Optional[float] = 10.0, channel_options: Optional[ChannelOptions] = None,
                 token: Optional[str] = None, tls: Tls = None, tls_cert: Optional[Pem] = None,
                 tls_key: Optional[Pem] = None, tls_server_name: Optional[str] = None) -> None:
        self._thread = _LoopThread.get()
        core_channel = _core_channel(channel)

        async def make() -> _client.Client:
            return _client.Client(target, channel=core_channel, timeout=timeout, channel_options=channel_options,
                                  token=token, tls=tls, tls_cert=tls_cert, tls_key=tls_key,
                                  tls_server_name=tls_server_name)
        self._core = self._thread.run(make())
        self.admin_stub = _unary.StubProxy(self._core._admin, _client._ADMIN, timeout, self._thread.run)
        self.queue_stub = _unary.StubProxy(self._core._queue, _client._QUEUE, timeout, self._thread.run)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the channel, if this Client made it."""
        self._thread.run(self._core.close())

    schedule = _blocking(_client.Client.schedule)
    cancel = _blocking(_client.Client.cancel)
    reschedule = _blocking(_client.Client.reschedule)
    create_topic = _blocking(_client.Client.create_topic)
    get_topic = _blocking(_client.Client.get_topic)
    list_topics = _blocking(_client.Client.list_topics)
    update_topic = _blocking(_client.Client.update_topic)
    delete_topic = _blocking(_client.Client.delete_topic)
    create_subscription = _blocking(_client.Client.create_subscription)
    get_subscription = _blocking(_client.Client.get_subscription)
    list_subscriptions = _blocking(_client.Client.list_subscriptions)
    update_subscription = _blocking(_client.Client.update_subscription)
    delete_subscription = _blocking(_client.Client.delete_subscription)
    list_dead_letters = _blocking(_client.Client.list_dead_letters)
    redrive_dead_letters = _blocking(_client.Client.redrive_dead_letters)
    purge_dead_letters = _blocking(_client.Client.purge_dead_letters)
    seek = _blocking(_client.Client.seek)
    put_schedule = _blocking(_client.Client.put_schedule)
    get_schedule = _blocking(_client.Client.get_schedule)
    list_schedules = _blocking(_client.Client.list_schedules)
    delete_schedule = _blocking(_client.Client.delete_schedule)
