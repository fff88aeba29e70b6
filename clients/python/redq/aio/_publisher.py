"""The asyncio Publisher: publish() calls batched onto one PublishStream.

Every publish() appends a small tuple to its topic's pending list and wakes
the writer task; the writer runs on the next turn of the event loop, so all
that was published in the meantime goes out as one request (per topic, bounded
by max_batch_messages and max_batch_bytes). Up to max_in_flight requests are
on the stream unanswered; while they all are, publishes accumulate and leave
as soon as a response frees a slot. Requests answered UNAVAILABLE, and those
unanswered when the stream breaks, are sent again whole after a backoff, with
the same request dedupe id (a random prefix and a counter), so a retry cannot
publish a message twice. One id per request, not per message: the server
keeps one key per request instead of one per message.

Flow control counts the messages (and their estimated bytes) published and
not yet answered; a publish past a limit waits or raises FlowControlError.
Each message has a deadline (`timeout` after its publish()): one timer, armed
for the oldest deadline, fails what is overdue with DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import itertools
import os
import re
import time
from collections import deque
from typing import TYPE_CHECKING, Iterable, Literal, Mapping, Optional, TypedDict, Union

import grpc

from .. import _common, _security
from .._common import ChannelOptions, FlowControlError, Payload, RedqError, Seconds, Time
from .._security import Pem, Tls
from ..v1 import queue_pb2 as pb
from ..v1 import queue_pb2_grpc

if TYPE_CHECKING:
    from typing_extensions import Unpack

# Indices into an entry, the tuple one publish() leaves in a pending list:
# (payload, dedupe_id, extra PublishMessage fields or None, sink, index in a
#  batch, flush epoch, estimated encoded size, deadline in loop time). A sink
# is the caller's future (asyncio or concurrent.futures) or a _Batch. In a
# _Request, an entry whose deadline passed is replaced by None.
_PAYLOAD, _DEDUPE, _EXTRA, _SINK, _INDEX, _EPOCH, _SIZE, _DEADLINE = range(8)
_NO_DEADLINE = float("inf")
# Encoded bytes of a message besides its payload and dedupe id (tags, lengths).
_OVERHEAD = 16
_INVALID_STATE = (asyncio.InvalidStateError, concurrent.futures.InvalidStateError)


class PublishOptions(TypedDict, total=False):
    """The keyword options of publish(), which publish_when_ready() takes as **options."""

    attributes: Optional[Mapping[str, str]]
    ordering_key: str
    dedupe_id: Optional[str]
    delay: Optional[Seconds]
    deliver_at: Optional[Time]


class PublisherOptions(TypedDict, total=False):
    """The keyword options of a Publisher but its channel= (the sync Publisher takes them as **options)."""

    max_batch_messages: int
    max_batch_bytes: int
    linger: float
    max_in_flight: int
    timeout: Optional[Seconds]
    max_outstanding_messages: Optional[int]
    max_outstanding_bytes: Optional[int]
    limit_exceeded: Literal["block", "raise"]
    auto_dedupe: bool
    channel_options: Optional[ChannelOptions]
    token: Optional[str]
    tls: Tls
    tls_cert: Optional[Pem]
    tls_key: Optional[Pem]
    tls_server_name: Optional[str]


_PUBLISH_OPTIONS = tuple(PublishOptions.__annotations__)
# "messages[3].payload: must not be empty": the server names the bad message.
_BAD_MESSAGE = re.compile(r"messages\[(\d+)\]")


class _StreamBroken(Exception):
    """Raised inside the reader to end a stream as if its connection dropped."""


class PublisherStats:
    """Counters of a Publisher: what was asked (queued), written (sent) and answered (confirmed, failed)."""

    __slots__ = ("messages_queued", "messages_sent", "messages_confirmed", "messages_failed", "requests_sent",
                 "retries", "duplicates", "reconnects")

    def __init__(self):
        self.messages_queued = 0  # messages handed to publish() / publish_batch()
        self.messages_sent = 0  # messages handed to the stream (resends included)
        self.messages_confirmed = 0  # messages the server answered with an id (duplicates included)
        self.messages_failed = 0  # messages whose future failed (refused, timed out, publisher closed)
        self.requests_sent = 0  # PublishStream requests handed to the stream (resends included)
        self.retries = 0  # requests written again (UNAVAILABLE, broken stream, a bad message removed)
        self.duplicates = 0  # messages the server answered as duplicates
        self.reconnects = 0  # streams reopened after one broke

    def __repr__(self):
        return "PublisherStats(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__) + ")"


class _Batch:
    """The sink of publish_batch(): one future for the ids of many messages."""

    __slots__ = ("future", "ids", "left")

    def __init__(self, future, n):
        self.future, self.ids, self.left = future, [None] * n, n

    def set_at(self, index, message_id):
        if self.ids is not None:
            self.ids[index] = message_id
            self.left -= 1
            if not self.left:
                _settle(self.future, self.ids, None)

    def fail(self, exc):
        if self.ids is not None:
            self.ids = None
            _settle(self.future, None, exc)


def _settle(future, result, exc):
    try:
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)
    except _INVALID_STATE:  # cancelled by its caller
        pass


class _Request:
    """A request on its way: its entries and the built message, kept for a resend."""

    __slots__ = ("topic", "entries", "proto", "attempts", "error")

    def __init__(self, topic, entries, proto):
        self.topic, self.entries, self.proto = topic, entries, proto
        self.attempts = 0
        self.error = None  # the last error it was retried after

    def deadline(self):
        """The earliest deadline of its entries still waiting (None: none is)."""
        return min((e[_DEADLINE] for e in self.entries if e is not None), default=None)


class _FlowControl:
    """Messages and bytes published and not yet answered, against the limits
    (None: no limit). An asyncio Publisher's; the sync one replaces it with a
    thread-safe kind (see redq._sync)."""

    def __init__(self, max_messages, max_bytes, limit_exceeded):
        if limit_exceeded not in ("block", "raise"):
            raise ValueError(f"redq: limit_exceeded must be 'block' or 'raise', not {limit_exceeded!r}")
        for name, value in (("max_outstanding_messages", max_messages), ("max_outstanding_bytes", max_bytes)):
            if value is not None and value < 1:
                raise ValueError(f"redq: {name} must be at least 1 (or None: no limit), not {value!r}")
        self.max_messages = max_messages if max_messages is not None else float("inf")
        self.max_bytes = max_bytes if max_bytes is not None else float("inf")
        self.block = limit_exceeded == "block"
        self.messages = 0
        self.bytes = 0
        self._waiters = deque()  # futures of publish_when_ready() calls, first come first served

    def fits(self, n, size):
        """Whether n more messages of size bytes stay within the limits (always, when none is outstanding)."""
        return not self.messages or (self.messages + n <= self.max_messages and self.bytes + size <= self.max_bytes)

    def error(self, n, size):
        return FlowControlError(
            f"publishing {n} message(s) of {size} bytes would pass the flow-control limits "
            f"({self.messages} messages, {self.bytes} bytes outstanding; limits {self.max_messages} messages, "
            f"{self.max_bytes} bytes)")

    def admit_now(self, n, size):
        """Counts messages in, or raises FlowControlError (the asyncio publish() cannot wait)."""
        if not self.fits(n, size):
            raise self.error(n, size)
        self.messages += n
        self.bytes += size

    async def admit(self, loop, n, size):
        """Counts messages in, waiting for room when limit_exceeded is "block" (FlowControlError otherwise)."""
        if self._waiters or not self.fits(n, size):
            if not self.block:
                raise self.error(n, size)
            future = loop.create_future()
            self._waiters.append((future, n, size))
            try:
                await future
            except asyncio.CancelledError:
                if future.cancelled():
                    self._wake()  # its turn may have been holding up the next
                elif future.exception() is None:
                    self.release(n, size)  # admitted as its caller was cancelled: hand the room on
                raise
            return
        self.messages += n
        self.bytes += size

    def release(self, n, size):
        self.messages -= n
        self.bytes -= size
        if self._waiters:
            self._wake()

    def _wake(self):
        waiters = self._waiters
        while waiters:
            future, n, size = waiters[0]
            if future.done():
                waiters.popleft()
                continue
            if not self.fits(n, size):
                return
            waiters.popleft()
            self.messages += n
            self.bytes += size
            future.set_result(None)

    def fail_waiters(self, error):
        for future, _, _ in self._waiters:
            if not future.done():
                future.set_exception(error)
        self._waiters.clear()


class Publisher:
    """Publishes messages over a PublishStream, batching and retrying.

    Create it inside a running event loop (``async with Publisher() as pub:``).

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051), or pass
        channel= a Connection (redq.aio.connect()) or a grpc.aio channel
        (not closed by close()).
    max_batch_messages, max_batch_bytes: bounds of one request (server
        default: at most 1000 messages per request).
    linger: seconds a batch that is not full may wait for more messages while
        other requests are in flight (0: leave as soon as a slot is free).
    max_in_flight: requests on the stream unanswered at once.
    timeout: seconds (or a timedelta) after its publish() within which a
        message must be answered; then its future fails with
        DEADLINE_EXCEEDED (it may still have been published, as with any
        deadline) and it is not sent again. None: no deadline.
    max_outstanding_messages, max_outstanding_bytes: flow control, the
        messages (and their estimated encoded bytes) published and not yet
        answered; None: no limit. A publish past a limit is let through
        when nothing else is outstanding.
    limit_exceeded: at a limit, "block" waits for room (in asyncio, only
        publish_when_ready() can wait: publish() and publish_batch() raise
        FlowControlError, they cannot block the event loop) or "raise"
        raises FlowControlError (nothing is queued).
    auto_dedupe: give each request a dedupe_id, so that retries cannot
        duplicate its messages. A topic whose kind refuses it (LIST: a list
        element is bytes only) gets none: its first request is sent again
        without it, and its later ones go without.
    token: sent as `authorization: Bearer <token>` on the stream.
    tls: True (system roots), a root CA (PEM bytes or path) or a
        grpc.ChannelCredentials; default plaintext. tls_cert, tls_key: a client
        certificate and its key (PEM bytes or paths), for mTLS.
        tls_server_name: the name the server's certificate is checked against,
        when it is not the target's host.
    A request refused UNAUTHENTICATED or PERMISSION_DENIED is not retried: its
    futures fail with that RedqError (the whole stream refused: all pending ones).
    """

    def __init__(self, target: Optional[str] = None, *,
                 channel: Union[_security.Connection, grpc.aio.Channel, None] = None, max_batch_messages: int = 1000,
                 max_batch_bytes: int = 3 * 1024 * 1024, linger: float = 0.0, max_in_flight: int = 8,
                 timeout: Optional[Seconds] = 60.0, max_outstanding_messages: Optional[int] = 10_000,
                 max_outstanding_bytes: Optional[int] = 64 * 1024 * 1024,
                 limit_exceeded: Literal["block", "raise"] = "block", auto_dedupe: bool = True,
                 channel_options: Optional[ChannelOptions] = None, token: Optional[str] = None, tls: Tls = None,
                 tls_cert: Optional[Pem] = None, tls_key: Optional[Pem] = None,
                 tls_server_name: Optional[str] = None) -> None:
        if max_batch_messages < 1 or max_batch_bytes < 1 or max_in_flight < 1:
            raise ValueError("max_batch_messages, max_batch_bytes and max_in_flight must be at least 1")
        if timeout is not None:
            timeout = _common.seconds(timeout, "timeout")
            if not timeout > 0:
                raise ValueError(f"redq: timeout must be positive (or None: no deadline), not {timeout!r}")
        self._flow = _FlowControl(max_outstanding_messages, max_outstanding_bytes, limit_exceeded)
        self._owns_channel = channel is None
        self._channel = _security.open_channel(target, channel, is_async=True, channel_options=channel_options,
                                               token=token, tls=tls, tls_cert=tls_cert, tls_key=tls_key,
                                               tls_server_name=tls_server_name)
        self._stub = queue_pb2_grpc.QueueServiceStub(self._channel)
        self._max_messages = max_batch_messages
        self._max_bytes = max_batch_bytes
        self._linger = linger
        self._max_in_flight = max_in_flight
        self._timeout = timeout if timeout is not None else _NO_DEADLINE
        self._deadline_timer = None  # fails what is overdue; armed for the oldest deadline
        self._auto_dedupe = auto_dedupe
        # Topics whose kind refuses dedupe ids (LIST: a list element is bytes only), learnt from
        # the server's refusal: their requests go without the automatic one.
        self._no_dedupe_topics: set[str] = set()
        self._dedupe_prefix = base64.urlsafe_b64encode(os.urandom(12)).decode() + "."
        self._dedupe_seq = itertools.count()
        self._loop = None
        self._pending: dict[str, list[tuple]] = {}  # topic -> entries not yet sent, in publish order
        self._since: dict[str, float] = {}  # topic -> loop time of its oldest pending entry (for linger)
        self._ready: deque[str] = deque()  # topics with pending entries, served in turn
        self._retry: deque[_Request] = deque()  # _Requests to send again, oldest first
        self._waiting: set[_Request] = set()  # _Requests sleeping out a backoff before their resend
        self._inflight: dict[int, _Request] = {}  # request_id -> _Request written, unanswered
        self._request_ids = itertools.count(1)
        self._epoch = 0  # flush() ends an epoch: it waits for the entries of those before
        self._open: dict[int, int] = {}  # epoch -> its entries not yet answered
        self._flushes: list[tuple[int, asyncio.Future[None]]] = []  # (epoch, future) of flush() calls waiting
        self._wake = None  # future the idle writer waits on
        self._linger_timer = None
        self._runner = None  # task running the stream, while there is one
        self._backoff = _common.Backoff()
        self._lose_next_response = False  # test hook: drop a response, then break the stream
        self._call = None
        self._writer_error = None
        self._closed = False
        self._closing = False
        self.stats = PublisherStats()

    async def __aenter__(self) -> Publisher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- publishing

    def publish(self, topic: str, payload: Payload, *, attributes: Optional[Mapping[str, str]] = None,
                ordering_key: str = "", dedupe_id: Optional[str] = None, delay: Optional[Seconds] = None,
                deliver_at: Optional[Time] = None) -> asyncio.Future[str]:
        """Queues one message; returns an asyncio.Future of its message id.

        payload: bytes, bytearray or memoryview, not empty (a str or any
        other type is a TypeError: encode text yourself). delay (seconds or
        timedelta) or deliver_at (datetime or epoch seconds) schedule it.
        The future fails with RedqError (carrying the gRPC code) if the
        server refuses the message, DEADLINE_EXCEEDED after `timeout`. At a
        flow-control limit this raises FlowControlError (it cannot wait: see
        publish_when_ready()).
        """
        future = (self._loop or self._bind_loop()).create_future()
        entry = self._entry(payload, attributes, ordering_key, dedupe_id, delay, deliver_at, future, 0)
        self._flow.admit_now(1, entry[_SIZE])
        self._add(topic, entry)
        return future

    async def publish_when_ready(self, topic: str, payload: Payload,
                                 **options: Unpack[PublishOptions]) -> asyncio.Future[str]:
        """publish(), waiting for room under the flow-control limits first
        (limit_exceeded="block"; with "raise", FlowControlError at once).
        Returns the future of the message's id once the message is queued:

            future = await publisher.publish_when_ready("orders", b"...")
        """
        _common.check_options(options, _PUBLISH_OPTIONS, "publish_when_ready()")
        future = (self._loop or self._bind_loop()).create_future()
        entry = self._entry(payload, options.get("attributes"), options.get("ordering_key", ""),
                            options.get("dedupe_id"), options.get("delay"), options.get("deliver_at"), future, 0)
        await self._flow.admit(self._loop, 1, entry[_SIZE])
        if self._closed:
            self._flow.release(1, entry[_SIZE])
            raise RuntimeError("redq: the publisher is closed")
        # Queued now: its epoch (a flush() called meanwhile need not wait for it) and deadline.
        self._add(topic, entry[:_EPOCH] + (self._epoch, entry[_SIZE], self._deadline()))
        return future

    def publish_batch(self, topic: str, payloads: Iterable[Payload], *, attributes: Optional[Mapping[str, str]] = None,
                      ordering_key: str = "", delay: Optional[Seconds] = None,
                      deliver_at: Optional[Time] = None) -> asyncio.Future[list[str]]:
        """Queues many messages (same attributes for all); returns one future of their ids, in order.

        Cheaper than a publish() per message: one future for the lot. The
        messages still share requests with other publishes of the topic.
        At a flow-control limit this raises FlowControlError.
        """
        future = (self._loop or self._bind_loop()).create_future()
        entries = self._batch_entries(payloads, attributes, ordering_key, delay, deliver_at, future)
        if entries:
            self._flow.admit_now(len(entries), sum(e[_SIZE] for e in entries))
            self._add_many(topic, entries)
        return future

    def _batch_entries(self, payloads, attributes, ordering_key, delay, deliver_at, future):
        """The entries of publish_batch(), sharing one _Batch sink (also used by the sync Publisher)."""
        payloads = list(payloads)
        if not payloads:
            future.set_result([])
            return []
        batch = _Batch(future, len(payloads))
        if attributes or ordering_key or delay is not None or deliver_at is not None:
            entry = self._entry
            return [entry(p, attributes, ordering_key, None, delay, deliver_at, batch, i)
                    for i, p in enumerate(payloads)]
        # The common case, unrolled: a payload only.
        if self._closed:
            raise RuntimeError("redq: the publisher is closed")
        epoch, as_payload, deadline = self._epoch, _common.as_payload, self._deadline()
        entries = []
        for i, payload in enumerate(payloads):
            if payload.__class__ is not bytes or not payload:
                payload = as_payload(payload)
            entries.append((payload, "", None, batch, i, epoch, len(payload) + _OVERHEAD, deadline))
        return entries

    def _entry(self, payload, attributes, ordering_key, dedupe_id, delay, deliver_at, sink, index):
        """The pending-list tuple of one message (also built by the sync Publisher, in its caller's thread)."""
        if self._closed:
            raise RuntimeError("redq: the publisher is closed")
        if payload.__class__ is not bytes or not payload:
            payload = _common.as_payload(payload)
        if dedupe_id is None:
            dedupe_id = ""
        size = len(payload) + len(dedupe_id) + _OVERHEAD
        extra = None
        if attributes or ordering_key or delay is not None or deliver_at is not None:
            extra = _common.timing_fields(delay, deliver_at)
            if attributes:
                extra["attributes"] = attributes
                size += sum(len(k) + len(v) + 8 for k, v in attributes.items())
            if ordering_key:
                extra["ordering_key"] = ordering_key
                size += len(ordering_key) + 4
            size += 16
        return (payload, dedupe_id, extra, sink, index, self._epoch, size, self._deadline())

    def _deadline(self):
        """The deadline of a message published now (time.monotonic(), which is the loop's clock: any thread)."""
        return time.monotonic() + self._timeout

    def _bind_loop(self):
        self._loop = asyncio.get_running_loop()
        return self._loop

    def _add(self, topic, entry):
        epoch = entry[_EPOCH]
        self._open[epoch] = self._open.get(epoch, 0) + 1
        self.stats.messages_queued += 1
        entries = self._pending.get(topic)
        if entries is None:
            entries = self._pending[topic] = []
            self._ready.append(topic)
            if self._linger:
                self._since[topic] = self._loop.time()
        entries.append(entry)
        if self._deadline_timer is None:
            self._arm_deadline_timer(entry[_DEADLINE])
        self._kick()

    def _add_many(self, topic, new):
        """_add() for entries of one epoch (a batch)."""
        epoch = new[0][_EPOCH]
        self._open[epoch] = self._open.get(epoch, 0) + len(new)
        self.stats.messages_queued += len(new)
        entries = self._pending.get(topic)
        if entries is None:
            self._pending[topic] = list(new)
            self._ready.append(topic)
            if self._linger:
                self._since[topic] = self._loop.time()
        else:
            entries.extend(new)
        if self._deadline_timer is None:
            self._arm_deadline_timer(new[0][_DEADLINE])
        self._kick()

    def _kick(self):
        """Wakes the writer (it runs on the next turn of the loop), or starts a stream."""
        wake, self._wake = self._wake, None
        if wake is not None:
            _common.resolve_once(wake)
        elif self._runner is None and not self._closing:
            self._runner = self._loop.create_task(self._run())

    async def flush(self) -> None:
        """Waits until every message published before this call is answered (or failed)."""
        epoch = self._epoch
        self._epoch += 1
        if any(e <= epoch for e in self._open):
            future = (self._loop or self._bind_loop()).create_future()
            self._flushes.append((epoch, future))
            await future

    async def close(self, timeout: Optional[float] = None) -> None:
        """Flushes, ends the stream and closes the channel (if this Publisher made it).

        timeout: seconds to wait for the answers of what is outstanding
        (None: until each message's own `timeout`); what is still unanswered
        then fails with DEADLINE_EXCEEDED. Never waits much longer than that.
        """
        if self._closed:
            return
        self._closed = True
        answered = True
        try:
            if self._loop is not None:
                self._flow.fail_waiters(RuntimeError("redq: the publisher is closed"))
                try:
                    await asyncio.wait_for(self.flush(), timeout)
                except asyncio.TimeoutError:
                    answered = False
                    self._fail_everything(RedqError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                                    f"the publisher closed after {timeout} s without an answer"))
        finally:
            self._closing = True
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()
                self._deadline_timer = None
            runner = self._runner
            if runner is not None:
                call = self._call
                try:
                    if answered:  # a server that answers ends the stream at once; one that does not is left
                        if call is not None:
                            await asyncio.wait_for(call.done_writing(), 5.0)
                        await asyncio.wait_for(asyncio.shield(runner), 5.0)
                except (asyncio.TimeoutError, grpc.RpcError, asyncio.InvalidStateError):
                    pass
                finally:
                    runner.cancel()
            if self._owns_channel:
                await self._channel.close()

    # ---- deadlines

    def _arm_deadline_timer(self, deadline):
        if deadline != _NO_DEADLINE:
            self._deadline_timer = self._loop.call_later(max(0.0, deadline - time.monotonic()), self._expire)

    def _expire(self):
        """Fails the messages whose deadline passed: those not sent are dropped, those
        sent are skipped when their request is answered (or sent again)."""
        self._deadline_timer = None
        now = time.monotonic()
        overdue = []
        for topic in list(self._ready):
            entries = self._pending[topic]
            n = 0
            while n < len(entries) and entries[n][_DEADLINE] <= now:
                n += 1
            if n:
                overdue += entries[:n]
                del entries[:n]
                if not entries:
                    del self._pending[topic]
                    self._since.pop(topic, None)
                    self._ready.remove(topic)
        requests = list(self._inflight.values()) + list(self._retry) + list(self._waiting)
        for request in requests:
            entries = request.entries
            for i, entry in enumerate(entries):
                if entry is not None and entry[_DEADLINE] <= now:
                    overdue.append(entry)
                    entries[i] = None
        if overdue:
            self._finish(overdue, None, RedqError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                                  f"no answer from the server within {self._timeout} s"))
        # Requests of overdue messages only: not worth an answer, nor a resend.
        for request_id, request in list(self._inflight.items()):
            if request.deadline() is None:
                del self._inflight[request_id]
        self._retry = deque(r for r in self._retry if r.deadline() is not None)
        self._waiting = {r for r in self._waiting if r.deadline() is not None}
        deadlines = [entries[0][_DEADLINE] for entries in self._pending.values()]
        deadlines += [d for d in (r.deadline() for r in requests) if d is not None]
        if deadlines:
            self._arm_deadline_timer(min(deadlines))
        if self._retry or self._ready:
            self._kick()  # a slot may have been freed

    # ---- the stream

    async def _run(self):
        """Runs one stream after another while there is something to send."""
        try:
            while True:
                error = await self._stream()
                lost = sorted(self._inflight.items())
                self._inflight.clear()
                for _, request in lost:
                    request.error = error
                self._retry.extendleft(rec for _, rec in reversed(lost))
                if self._closing:
                    return
                if error is not None and error.code not in _common.RETRYABLE_STREAM_CODES:
                    self._fail_everything(error)
                    return
                if not (self._retry or self._ready or self._waiting):
                    return  # idle: the next publish opens a new stream
                self.stats.reconnects += 1
                await asyncio.sleep(self._backoff.next())
        finally:
            self._runner = None
            self._call = None
            self._wake = None
            if not self._closing and (self._retry or self._ready):
                self._kick()  # work arrived while this stream was ending

    async def _stream(self):
        """One PublishStream: a writer task and this reader. Returns the RedqError it ended with, or None."""
        call = self._call = self._stub.PublishStream()
        status = _common.StreamStatus(call)
        self._writer_error = None
        writer = self._loop.create_task(self._write(call))
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return None
                if self._lose_next_response:
                    self._lose_next_response = False
                    raise _StreamBroken()
                self._on_response(response)
        except _StreamBroken:
            return RedqError(grpc.StatusCode.UNAVAILABLE, "stream broken (test hook)")
        except grpc.RpcError as err:
            return await status.error(err)
        except asyncio.CancelledError:
            if self._writer_error is None:
                raise  # this task is being cancelled
            # grpc.aio raises CancelledError from read() when the writer cancelled the call
            return RedqError(grpc.StatusCode.INTERNAL, f"writing the stream failed: {self._writer_error!r}")
        finally:
            writer.cancel()
            self._wake = None
            call.cancel()

    async def _write(self, call):
        try:
            while True:
                request = self._next_request()
                if request is None:
                    self._wake = self._loop.create_future()
                    await self._wake
                    continue
                # Counted before the write returns: the server's answer may
                # come first, and a caller that has it must see the count.
                self.stats.requests_sent += 1
                self.stats.messages_sent += len(request.entries)
                await call.write(request.proto)
        except (grpc.RpcError, asyncio.InvalidStateError):
            pass  # the call ended under the write: the reader sees why and handles it
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 (end the stream rather than hang)
            self._writer_error = err
            call.cancel()

    def _next_request(self):
        """The next request to write, now in flight; None when there is none or no free slot."""
        if len(self._inflight) >= self._max_in_flight:
            return None
        if self._retry:
            request = self._retry.popleft()
            self.stats.retries += 1
        else:
            request = self._cut()
            if request is None:
                return None
        request_id = next(self._request_ids)
        request.proto.request_id = request_id
        self._inflight[request_id] = request
        return request

    def _cut(self):
        """Takes the next batch from the pending lists, topic after topic."""
        ready = self._ready
        for _ in range(len(ready)):
            topic = ready.popleft()
            entries = self._pending[topic]
            if self._linger and self._inflight and len(entries) < self._max_messages:
                waited = self._loop.time() - self._since[topic]
                if waited < self._linger:
                    ready.append(topic)
                    self._arm_linger(self._linger - waited)
                    continue
            proto = pb.PublishStreamRequest(topic=topic)
            if self._auto_dedupe and topic not in self._no_dedupe_topics:
                proto.dedupe_id = f"{self._dedupe_prefix}{next(self._dedupe_seq):x}"
            add = proto.messages.add
            max_messages, max_bytes = self._max_messages, self._max_bytes
            n = size = 0
            for entry in entries:
                if n and (n == max_messages or size + entry[_SIZE] > max_bytes):
                    break
                extra = entry[_EXTRA]
                if extra is None:
                    if entry[_DEDUPE]:
                        add(payload=entry[_PAYLOAD], dedupe_id=entry[_DEDUPE])
                    else:
                        add(payload=entry[_PAYLOAD])
                else:
                    add(payload=entry[_PAYLOAD], dedupe_id=entry[_DEDUPE], **extra)
                size += entry[_SIZE]
                n += 1
            if n == len(entries):
                del self._pending[topic]
                self._since.pop(topic, None)
                return _Request(topic, entries, proto)
            taken = entries[:n]
            del entries[:n]
            ready.append(topic)
            if self._linger:
                self._since[topic] = self._loop.time()
            return _Request(topic, taken, proto)
        return None

    def _arm_linger(self, delay):
        if self._linger_timer is None:
            def fire():
                self._linger_timer = None
                self._kick()
            self._linger_timer = self._loop.call_later(delay, fire)

    # ---- responses

    def _on_response(self, response):
        request = self._inflight.pop(response.request_id, None)
        if request is None:
            return  # not ours (a response to a request of an earlier stream cannot come here)
        self._backoff.reset()
        if response.HasField("status"):
            self._on_failure(request, RedqError.from_status(response.status))
        else:
            ids = response.message_ids
            if len(ids) != len(request.entries):
                self._finish(request.entries, None, RedqError(
                    grpc.StatusCode.INTERNAL, f"{len(ids)} ids answered for {len(request.entries)} messages"))
            else:
                if any(response.duplicates):
                    self.stats.duplicates += sum(response.duplicates)
                self._finish(request.entries, ids, None)
        if self._retry or self._ready:
            self._kick()

    def _on_failure(self, request, error):
        code = error.code
        if code == grpc.StatusCode.UNAVAILABLE and not self._closing:
            request.attempts += 1
            request.error = error
            self._waiting.add(request)

            def resend():
                if request in self._waiting:  # else its messages' deadlines passed meanwhile
                    self._waiting.discard(request)
                    self._retry.append(request)
                    self._kick()
            self._loop.call_later(_common.backoff_delay(request.attempts), resend)
            return
        if code == grpc.StatusCode.INVALID_ARGUMENT and request.proto.dedupe_id and \
                error.message.startswith("dedupe_id:"):
            # The automatic dedupe id, refused: the topic's kind takes none (LIST: a list element
            # is bytes only). Its requests go without one from now on, this one at once.
            self._no_dedupe_topics.add(request.topic)
            request.proto.ClearField("dedupe_id")
            self._retry.appendleft(request)
            return
        entries = request.entries
        match = _BAD_MESSAGE.match(error.message) if code == grpc.StatusCode.INVALID_ARGUMENT else None
        if match and len(entries) > 1 and int(match.group(1)) < len(entries):
            # One message is bad: fail it alone and send the others again.
            bad = int(match.group(1))
            self._finish(entries[bad:bad + 1], None, error)
            del request.proto.messages[bad]
            request.entries = entries[:bad] + entries[bad + 1:]
            self._retry.appendleft(request)
            return
        self._finish(entries, None, error)

    def _finish(self, entries, ids, error):
        """Resolves (ids) or rejects (error) the sinks of entries (None: failed
        already) and counts them out of their epochs and the flow control."""
        open_ = self._open
        closed_epoch = False
        n = size = 0
        for i, entry in enumerate(entries):
            if entry is None:
                continue
            n += 1
            size += entry[_SIZE]
            sink = entry[_SINK]
            if sink.__class__ is _Batch:
                if error is None:
                    sink.set_at(entry[_INDEX], ids[i])
                else:
                    sink.fail(error)
            else:
                try:
                    if error is None:
                        sink.set_result(ids[i])
                    else:
                        sink.set_exception(error)
                except _INVALID_STATE:
                    pass
            epoch = entry[_EPOCH]
            left = open_[epoch] - 1
            if left:
                open_[epoch] = left
            else:
                del open_[epoch]
                closed_epoch = True
        if error is None:
            self.stats.messages_confirmed += n
        else:
            self.stats.messages_failed += n
        self._flow.release(n, size)
        if closed_epoch and self._flushes:
            oldest = min(open_, default=None)
            still = []
            for epoch, future in self._flushes:
                if oldest is None or epoch < oldest:
                    if not future.done():
                        future.set_result(None)
                else:
                    still.append((epoch, future))
            self._flushes = still

    def _fail_everything(self, error):
        """Fails every message not answered yet: pending, in flight, waiting for a resend."""
        for request in list(self._inflight.values()) + list(self._retry) + list(self._waiting):
            self._finish(request.entries, None, error)
        self._inflight.clear()
        self._retry.clear()
        self._waiting.clear()
        for topic in list(self._ready):
            self._finish(self._pending.pop(topic), None, error)
        self._ready.clear()
        self._since.clear()
