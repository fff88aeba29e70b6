"""The asyncio Subscriber: StreamingSubscribe with handlers, batched acks and lease extension.

One Subscription runs one stream. A reader task turns each SubscribeResponse
into Message objects, notes their leases and hands them to the handler: a
coroutine function runs in `concurrency` worker tasks, a plain function is
called by the reader itself (it could not overlap anything on the loop
anyway, and this saves a task switch per message). Acks, nacks and deadline
extensions go into lists that a writer task sends as one request whenever it
is free, so what accumulates while a request is being written leaves in the
next one; while the stream holds less than half its max_outstanding, an ack
or nack may wait up to ack_linger to share a request with later ones. A
single timer extends the leases of messages held longer than half the ack
deadline. A broken stream is reopened after a backoff; settlements of
messages received on the old stream are sent on the new one (ack ids are
valid on any stream).

Confirmations: a request carrying an ack or nack that someone may wait for
(message.ack() and nack() return a future) asks the server to `confirm`
it; the server answers with the ids it applied, lost or found invalid, and
the futures settle by id. flush() adds a barrier: an id that is no ack id
(`barrier:<n>`), which the server reports back as invalid in the
confirmation of the batch it was applied in. Batches are applied in order,
so that confirmation means every earlier request was applied too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import itertools
import logging
from collections import deque
from typing import Callable, Dict, Generic, Literal, Optional, Tuple, TypeVar, Union

import grpc

from .. import _common, _security
from .._common import AckError, ChannelOptions, RedqError, Seconds
from .._security import Pem, Tls
from ..v1 import queue_pb2 as pb
from ..v1 import queue_pb2_grpc

log = logging.getLogger("redq")

_ACK, _NACK = 1, 2
# Ids per field of one request, well under the server's --max-outstanding-limit.
_MAX_IDS = 2500
_BARRIER = "barrier:"
_INVALID_STATE = (asyncio.InvalidStateError, concurrent.futures.InvalidStateError)
# What ack() and nack() return: an asyncio.Future, or a concurrent.futures.Future in the sync API.
_Settlement = TypeVar("_Settlement")


def _resolve(future, error=None):
    """Settles a settlement's future, unless its caller cancelled it. A failure
    nobody awaits is not logged as "never retrieved": it is an outcome."""
    try:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
            if future.__class__ is not concurrent.futures.Future:
                future.exception()  # marks it retrieved (asyncio would log it otherwise)
    except _INVALID_STATE:
        pass


class _Message(Generic[_Settlement]):
    """A delivered message: what redq.aio.Message and redq.Message share; they
    differ in the future ack() and nack() return (see Message)."""

    __slots__ = ("_received", "_subscription", "ack_id", "_settled", "_attributes", "_outcome")

    def __init__(self, received: pb.ReceivedMessage, subscription: Subscription) -> None:
        self._received = received
        self._subscription = subscription
        self.ack_id: str = received.ack_id
        self._settled = False
        self._attributes: Optional[Dict[str, str]] = None
        self._outcome: Optional[_Settlement] = None  # the future ack() or nack() returned

    @property
    def id(self) -> str:
        return self._received.message.id

    @property
    def payload(self) -> bytes:
        return self._received.message.payload

    @property
    def attributes(self) -> Dict[str, str]:
        if self._attributes is None:
            self._attributes = dict(self._received.message.attributes)
        return self._attributes

    @property
    def topic(self) -> str:
        """The topic it was published to (on a pattern subscription, the topic that matched)."""
        return self._received.message.topic

    @property
    def ordering_key(self) -> str:
        return self._received.message.ordering_key

    @property
    def publish_time(self) -> Optional[datetime.datetime]:
        return _common.from_timestamp(self._received.message.publish_time)

    @property
    def deliver_at(self) -> Optional[datetime.datetime]:
        return _common.from_timestamp(self._received.message.deliver_at)

    @property
    def delivery_attempt(self) -> int:
        return self._received.delivery_attempt

    @property
    def settled(self) -> bool:
        """True once ack() or nack() was called."""
        return self._settled

    def ack(self) -> _Settlement:
        """Marks the message done (sent batched on the stream, asking the server to confirm).

        Returns a future that settles when the server applied the ack:
        awaitable in asyncio (``await message.ack()``), a
        concurrent.futures.Future in the sync API. It fails with
        redq.AckError when the ack was not applied: FAILED_PRECONDITION, the
        lease was lost (the message is or will be redelivered); UNAVAILABLE,
        the stream ended before the server confirmed. Ignoring it is fine.
        A second ack() or nack() returns the first one's future. A delivery
        without an ack id (EPHEMERAL topics) has nothing to ack: nothing is
        sent, and the future is already resolved.
        """
        if self._settled:
            return self._outcome or self._subscription._already_settled(self.ack_id)
        self._settled = True
        if not self.ack_id:
            self._outcome = self._subscription._nothing_to_settle()
        else:
            self._outcome = self._subscription._settle(self.ack_id, _ACK, None, True)
        return self._outcome

    def nack(self, delay: Optional[Seconds] = None) -> _Settlement:
        """Gives the message back: redelivered after delay (seconds or timedelta),
        or after the subscription's retry backoff when delay is None.
        Returns a future as ack() does, settled when the server applied the nack
        (at once for a delivery without an ack id: EPHEMERAL messages are not redelivered)."""
        if self._settled:
            return self._outcome or self._subscription._already_settled(self.ack_id)
        if delay is not None:
            delay = _common.seconds(delay, "nack delay")
            if delay < 0:
                raise ValueError(f"nack delay must not be negative, got {delay!r}")
        self._settled = True
        if not self.ack_id:
            self._outcome = self._subscription._nothing_to_settle()
        else:
            self._outcome = self._subscription._settle(self.ack_id, _NACK, delay, True)
        return self._outcome

    def _settle_quietly(self, kind: int, delay: Optional[float] = None) -> None:
        """The library's own ack (a handler returned) or nack (it raised, or closing): nobody waits for it."""
        if not self._settled:
            self._settled = True
            if self.ack_id:
                self._subscription._settle(self.ack_id, kind, delay, False)

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, attempt={self.delivery_attempt}, payload={self.payload[:40]!r})"


class Message(_Message["asyncio.Future[None]"]):
    """A delivered message of the asyncio Subscriber: ack() and nack() return an
    asyncio.Future, settled when the server applied them.

    Call ack() or nack(delay) once; a handler that returns acks implicitly
    and one that raises nacks. Attributes: id, topic, payload (bytes),
    attributes (dict), ordering_key, publish_time and deliver_at (UTC
    datetimes), delivery_attempt (1 first), ack_id ("" on EPHEMERAL topics,
    whose messages are not acked: ack() and nack() do nothing there).
    """

    __slots__ = ()


Handler = Callable[[Message], object]
"""A handler of the asyncio Subscriber: a coroutine function or a plain function of a Message."""


class SubscriptionStats:
    """Counters of a Subscription: what was sent, and what the server confirmed it applied."""

    __slots__ = ("received", "responses", "acks_sent", "nacks_sent", "extensions_sent", "requests_sent",
                 "acks_confirmed", "nacks_confirmed", "lost", "reconnects", "handler_errors", "dropped")

    def __init__(self) -> None:
        self.received = 0  # messages delivered (redeliveries included)
        self.responses = 0  # SubscribeResponses that carried them
        self.acks_sent = 0  # ack ids sent (on the stream, or by the unary Ack at close)
        self.nacks_sent = 0  # nack ids sent
        self.extensions_sent = 0  # lease extensions sent (modify_deadline ids)
        self.requests_sent = 0  # requests written after the first
        self.acks_confirmed = 0  # acks the server confirmed it applied (those it was asked to confirm)
        self.nacks_confirmed = 0  # nacks the server confirmed it applied
        self.lost = 0  # acks, nacks and extensions the server confirmed it did not apply: the lease was lost
        self.reconnects = 0  # streams reopened after one broke
        self.handler_errors = 0  # handlers that raised
        self.dropped = 0  # EPHEMERAL: messages the server dropped for this stream because it fell behind

    def __repr__(self) -> str:
        return "SubscriptionStats(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__) + ")"


def subscribe_request(topic, subscription, *, max_outstanding, ack_deadline, consumer="", start=None,
                      retry_policy=None, max_delivery_attempts=0, max_outstanding_bytes=0, message_ordering=False,
                      pattern=None):
    """The SubscribeRequest opening a stream. retry_policy: (minimum, maximum) backoff in seconds.
    A topic, or a pattern of EPHEMERAL topics instead (a ValueError when both or neither are given)."""
    if bool(topic) == bool(pattern):
        raise ValueError("redq: subscribe to a topic or to a pattern of EPHEMERAL topics (pattern=), "
                         + ("not both" if topic else "one of them is needed"))
    request = pb.SubscribeRequest(
        topic=topic or "", pattern=pattern or "", subscription=subscription, consumer=consumer,
        max_outstanding_messages=max_outstanding, ack_deadline=_common.to_duration(ack_deadline),
        max_delivery_attempts=max_delivery_attempts, max_outstanding_bytes=max_outstanding_bytes,
        enable_message_ordering=message_ordering)
    if start is not None:
        request.start = {"earliest": pb.START_POSITION_EARLIEST, "latest": pb.START_POSITION_LATEST}.get(start, start)
    if retry_policy is not None:
        minimum, maximum = retry_policy
        request.retry_policy.minimum_backoff.CopyFrom(_common.to_duration(minimum))
        request.retry_policy.maximum_backoff.CopyFrom(_common.to_duration(maximum))
    return request


class Subscription:
    """One running subscription (returned by Subscriber.subscribe); close() stops it gracefully."""

    _message_class: type[_Message] = Message  # the sync API's Subscription delivers redq.Message

    def __init__(self, stub, request, handler, concurrency, loop, ack_linger):
        if not ack_linger >= 0:
            raise ValueError(f"ack_linger must not be negative, got {ack_linger!r}")
        self._stub = stub
        self._request = request
        self._handler = handler
        self._is_coroutine = asyncio.iscoroutinefunction(handler)
        self._concurrency = concurrency
        self._loop = loop
        ack_deadline = request.ack_deadline.seconds + request.ack_deadline.nanos / 1e9
        self._extend_after = ack_deadline / 2
        self._deadline = _common.to_duration(ack_deadline)
        self._leases = {}  # ack_id -> loop time its lease is next extended, oldest first
        self._lease_timer = None
        self._acks = []
        self._nacks = {}  # delay (None: the retry backoff) -> ack ids
        self._modifies = []
        self._ack_linger = ack_linger
        self._linger_timer = None
        # Messages received and not yet sent as acked or nacked, settled or not
        # (see _schedule_send). Not reset by a new stream: what an old one
        # delivered is settled on the new one, and leaves the window there.
        self._window = 0
        self._flow = None  # (max_outstanding_messages, max_outstanding_bytes) to send
        self._drained = None  # future close() waits on: the writer has nothing left to send
        self._wake = None  # future the idle writer waits on
        self._call = None
        self._writer_error = None
        self._closing = False
        self._closed = loop.create_future()  # result: None, or the RedqError it failed with
        self._opened = loop.create_future()  # result: None once a stream is open; or the error before that
        self._watchers = 0  # callers awaiting ready() or wait(): a failure is theirs, not the log's
        # Confirmations. Futures of ack()/nack() by ack id: not yet written, and
        # written on the current stream (waiting for the server's confirmation).
        self._confirming = {}
        self._unconfirmed = {}
        self._barriers = []  # (marker, future) of flush() calls, for the request that empties the lists
        self._barriers_sent = {}  # marker -> (future, requests with ids written up to it on this stream)
        self._barrier_seq = itertools.count(1)
        self._want_confirm = False  # something in the lists has a future: ask for a confirmation
        self._writes = 0  # requests with ack or nack ids written on the current stream...
        self._applied = 0  # ...and how many of them a barrier's confirmation showed applied
        self._unknown = None  # error for the next flush(): a stream ended before confirming some of them
        self._backoff = _common.Backoff()
        self.stats = SubscriptionStats()
        self._start_handlers()
        self._runner = loop.create_task(self._run())

    # ---- handlers (overridden by the sync Subscriber, which runs them in threads)

    def _start_handlers(self):
        self._queue = deque()  # messages not yet handed to a handler
        self._idle = []  # futures of idle workers
        self._spawned = set()  # tasks awaiting what a plain-function handler returned
        # A plain function cannot run concurrently with anything on this loop:
        # the reader calls it at once, without a worker's wake-up in between.
        self._inline = not self._is_coroutine
        self._workers = [] if self._inline else [
            self._loop.create_task(self._worker()) for _ in range(self._concurrency)]

    def _deliver(self, messages):
        if self._inline:
            for message in messages:
                self._run_inline(message)
        else:
            self._queue.extend(messages)
            self._wake_one()

    def _run_inline(self, message):
        try:
            result = self._handler(message)
        except Exception:  # noqa: BLE001 (a failing handler nacks its message)
            self._handler_failed(message)
            return
        if result is not None and result is not message._outcome and hasattr(result, "__await__"):
            # A coroutine a plain function returned runs on; the future of its own ack() is not its result.
            task = self._loop.create_task(self._finish(message, result))
            self._spawned.add(task)
            task.add_done_callback(self._spawned.discard)
        else:
            message._settle_quietly(_ACK)

    async def _finish(self, message, awaitable):
        try:
            await awaitable
        except Exception:  # noqa: BLE001
            self._handler_failed(message)
        else:
            message._settle_quietly(_ACK)

    def _handler_failed(self, message):
        self.stats.handler_errors += 1
        log.exception("redq: handler failed on message %s; nacking it", message.id)
        message._settle_quietly(_NACK)

    def _wake_one(self):
        # One worker at a time: a worker about to wait on its handler wakes the
        # next, so fast handlers cost no wake-ups and slow ones still overlap.
        while self._idle:
            future = self._idle.pop()
            if not future.done():
                future.set_result(None)
                return

    def _take_undelivered(self):
        undelivered = list(self._queue)
        self._queue.clear()
        return undelivered

    def _wake_idle(self):
        for future in self._idle:
            if not future.done():
                future.set_result(None)
        self._idle = []

    async def _wait_handlers(self, timeout):
        self._wake_idle()
        tasks = self._workers + list(self._spawned)
        if not tasks:
            return
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()

    async def _worker(self):
        handler, queue = self._handler, self._queue
        while True:
            if queue:
                message = queue.popleft()
                try:
                    coroutine = handler(message)
                    if queue:
                        self._wake_one()
                    await coroutine
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 (a failing handler nacks its message)
                    self._handler_failed(message)
                else:
                    message._settle_quietly(_ACK)
                continue
            if self._closing:
                return
            future = self._loop.create_future()
            self._idle.append(future)
            await future

    # ---- settlements

    def _settle(self, ack_id, kind, delay, observed, future=None):
        """Queues an ack or a nack for the writer (called in the loop's thread).
        observed: someone may wait for it, so it is confirmed; returns its future then."""
        self._leases.pop(ack_id, None)
        if kind is _ACK:
            self._acks.append(ack_id)
        else:
            ids = self._nacks.get(delay)
            if ids is None:
                self._nacks[delay] = [ack_id]
            else:
                ids.append(ack_id)
        if observed:
            if future is None:
                future = self._loop.create_future()
            if self._closed.done():  # failed: nothing is sent any more
                _resolve(future, self._settlement_error(ack_id, self._closed.result()))
            else:
                self._confirming[ack_id] = future
                self._want_confirm = True
        self._schedule_send()
        return future

    def _already_settled(self, ack_id):
        """The future of a second ack()/nack() of a message the library settled."""
        future = self._loop.create_future()
        _resolve(future, AckError(grpc.StatusCode.FAILED_PRECONDITION, "the message was settled already", ack_id))
        return future

    def _nothing_to_settle(self):
        """The future of ack()/nack() of a delivery without an ack id (EPHEMERAL): resolved, nothing sent."""
        future = self._loop.create_future()
        _resolve(future)
        return future

    @staticmethod
    def _settlement_error(ack_id, error):
        if error is None:
            return AckError(grpc.StatusCode.UNAVAILABLE, "the subscription closed before the server confirmed it",
                            ack_id)
        return AckError(error.code, error.message, ack_id)

    def _schedule_send(self):
        """Wakes the writer for a settlement, or lets the settlement linger."""
        # While the stream holds less than half its max_outstanding, the room
        # an ack frees is not needed yet: it may wait up to ack_linger for
        # later ones, and at a steady low rate one request (and one wake-up of
        # the server) then carries many acks instead of one (at 2,000 msg/s,
        # measured with the Node client: ~25% fewer context switches of the server).
        if self._window >= self._request.max_outstanding_messages / 2 or self._closing or not self._ack_linger:
            self._kick()
        elif self._linger_timer is None:
            def fire():
                self._linger_timer = None
                self._kick()
            self._linger_timer = self._loop.call_later(self._ack_linger, fire)

    def _kick(self):
        """Wakes the request writer (it runs on the next turn of the loop)."""
        wake, self._wake = self._wake, None
        _common.resolve_once(wake)

    def _extend_leases(self):
        self._lease_timer = None
        now = self._loop.time()
        leases = self._leases
        due = []
        for ack_id, when in leases.items():
            if when > now:
                break
            due.append(ack_id)
        if due:
            later = now + self._extend_after
            for ack_id in due:
                del leases[ack_id]
                leases[ack_id] = later
            self._modifies.extend(due)
            self._kick()
        self._arm_lease_timer()

    def _stop_leases(self):
        self._leases.clear()
        if self._lease_timer is not None:
            self._lease_timer.cancel()
            self._lease_timer = None

    def _arm_lease_timer(self):
        if self._lease_timer is None and self._leases:
            first = next(iter(self._leases.values()))
            self._lease_timer = self._loop.call_at(first, self._extend_leases)

    def set_flow_control(self, max_outstanding: int = 0, max_outstanding_bytes: int = 0) -> None:
        """Changes the stream's flow control (0 leaves a value as it is)."""
        self._flow = (max_outstanding, max_outstanding_bytes)
        if max_outstanding:
            self._request.max_outstanding_messages = max_outstanding
        if max_outstanding_bytes:
            self._request.max_outstanding_bytes = max_outstanding_bytes
        self._kick()

    def _next_request(self):
        """The next request for the writer: what accumulated since the last one."""
        held = self._hold_last() if self._closing and not self._leases else None
        request = self._build_request()
        if held is not None:  # back in the lists, for _settle_unary()
            kind, delay, ack_id = held
            if kind is _ACK:
                self._acks.append(ack_id)
            else:
                self._nacks.setdefault(delay, []).append(ack_id)
        return request

    def _hold_last(self):
        """Closing, no message held any more: keeps one settlement off the stream (see close()),
        one nobody waits for (a unary call does not confirm it)."""
        confirming = self._confirming
        for i in range(len(self._acks) - 1, -1, -1):
            if self._acks[i] not in confirming:
                return _ACK, None, self._acks.pop(i)
        for delay, ids in self._nacks.items():
            for i in range(len(ids) - 1, -1, -1):
                if ids[i] not in confirming:
                    ack_id = ids.pop(i)
                    if not ids:
                        del self._nacks[delay]
                    return _NACK, delay, ack_id
        return None

    def _build_request(self):
        acks, nacks, modifies = self._acks, self._nacks, self._modifies
        if not (acks or nacks or modifies or self._flow or self._barriers):
            return None
        request = pb.StreamingSubscribeRequest()
        if acks:
            if len(acks) > _MAX_IDS:
                request.ack_ids.extend(acks[:_MAX_IDS])
                del acks[:_MAX_IDS]
            else:
                request.ack_ids.extend(acks)
                self._acks = []
            self.stats.acks_sent += len(request.ack_ids)
        if nacks:
            delay = next(iter(nacks))
            ids = nacks[delay]
            if len(ids) > _MAX_IDS:
                request.nack_ids.extend(ids[:_MAX_IDS])
                del ids[:_MAX_IDS]
            else:
                request.nack_ids.extend(ids)
                del nacks[delay]
            if delay is not None:
                request.nack_delay.CopyFrom(_common.to_duration(delay))
            self.stats.nacks_sent += len(request.nack_ids)
        settled = len(request.ack_ids) + len(request.nack_ids)
        if settled:
            self._window -= settled
            self._writes += 1
            if self._linger_timer is not None:  # what lingered goes in this request
                self._linger_timer.cancel()
                self._linger_timer = None
            if self._want_confirm:
                request.confirm = True
                confirming = self._confirming
                if confirming:
                    unconfirmed = self._unconfirmed
                    for ids in (request.ack_ids, request.nack_ids):
                        for ack_id in ids:
                            future = confirming.pop(ack_id, None)
                            if future is not None:
                                unconfirmed[ack_id] = future
                if not confirming:
                    self._want_confirm = False
        if self._barriers and not (self._acks or self._nacks):
            # The request that empties the lists carries the barriers of the flush() calls made so far.
            for marker, future in self._barriers:
                request.ack_ids.append(marker)
                self._barriers_sent[marker] = (future, self._writes)
            self._barriers = []
            request.confirm = True
        if modifies:
            live = [a for a in modifies[:_MAX_IDS] if a in self._leases]  # settled since: skip
            del modifies[:_MAX_IDS]
            if live:
                request.modify_deadline_ack_ids.extend(live)
                request.modify_deadline.CopyFrom(self._deadline)
                self.stats.extensions_sent += len(live)
        if self._flow:
            request.max_outstanding_messages, request.max_outstanding_bytes = self._flow
            self._flow = None
        elif not (request.ack_ids or request.nack_ids or request.modify_deadline_ack_ids):
            return None  # only extensions of leases settled since
        return request

    def _on_confirmation(self, confirmation):
        """Settles the futures of the ids the server confirmed, and the flush() calls whose barrier came back."""
        stats = self.stats
        stats.acks_confirmed += len(confirmation.acked_ids)
        stats.nacks_confirmed += len(confirmation.nacked_ids)
        stats.lost += len(confirmation.lost_ids)
        unconfirmed = self._unconfirmed
        if unconfirmed:
            for ids in (confirmation.acked_ids, confirmation.nacked_ids):
                for ack_id in ids:
                    future = unconfirmed.pop(ack_id, None)
                    if future is not None:
                        _resolve(future)
            for ack_id in confirmation.lost_ids:
                future = unconfirmed.pop(ack_id, None)
                if future is not None:
                    _resolve(future, AckError(grpc.StatusCode.FAILED_PRECONDITION,
                                              "not applied: the lease was lost (acked, nacked or redelivered since)",
                                              ack_id))
        for ack_id in confirmation.invalid_ids:
            sent = self._barriers_sent.pop(ack_id, None)
            if sent is not None:
                future, writes = sent
                self._applied = max(self._applied, writes)
                _resolve(future)
                continue
            future = unconfirmed.pop(ack_id, None)
            if future is not None:
                _resolve(future, AckError(grpc.StatusCode.INVALID_ARGUMENT, "not an ack id redq issued", ack_id))

    def _stream_ended(self, ended_by):
        """What was written on a stream that ended and is not confirmed: unknown. Fails its futures
        (and the flush() calls waiting on its barriers); after a failure, the next flush() raises too."""
        error = ended_by or RedqError(grpc.StatusCode.UNAVAILABLE, "the stream ended")
        for ack_id, future in self._unconfirmed.items():
            _resolve(future, AckError(grpc.StatusCode.UNAVAILABLE,
                                      f"the stream ended before the server confirmed it ({error})", ack_id))
        self._unconfirmed = {}
        for future, _ in self._barriers_sent.values():
            _resolve(future, RedqError(grpc.StatusCode.UNAVAILABLE,
                                       f"the stream ended before the server confirmed the acks ({error})"))
        self._barriers_sent = {}
        if ended_by is not None and self._writes > self._applied:
            self._unknown = RedqError(grpc.StatusCode.UNAVAILABLE, f"a stream ended ({error}) before the server "
                                      "confirmed some acks or nacks sent on it")
        self._writes = self._applied = 0

    # ---- the stream

    async def _run(self):
        error = None
        try:
            while True:
                error = await self._stream()
                self._stream_ended(error)
                if self._closing:
                    error = None
                    return
                if error is not None and error.code not in _common.RETRYABLE_STREAM_CODES:
                    if not self._watchers:  # reported once: to the callers of ready()/wait(), else to the log
                        log.error("redq: subscription %s/%s failed: %s",
                                  self._request.topic or self._request.pattern, self._request.subscription, error)
                    return
                self.stats.reconnects += 1
                await asyncio.sleep(self._backoff.next())
        except asyncio.CancelledError:
            error = None  # close() ends it
            raise
        finally:
            if not self._closing:
                # Failed: take no more messages; those held are redelivered after their deadline.
                self._closing = True
                for message in self._take_undelivered():
                    message._settled = True
                self._stop_leases()
                self._wake_idle()
            self._end(error)

    def _end(self, error):
        """The subscription is over: settles ready(), wait(), and every future still waiting."""
        if not self._opened.done():
            self._opened.set_result(error or RedqError(grpc.StatusCode.CANCELLED, "closed before a stream opened"))
        if error is not None:
            for ack_id, future in self._confirming.items():
                _resolve(future, self._settlement_error(ack_id, error))
            self._confirming = {}
            for _, future in self._barriers:
                _resolve(future, error)
            self._barriers = []
        if not self._closed.done():
            self._closed.set_result(error)

    async def _stream(self):
        """One StreamingSubscribe stream. Returns the RedqError it ended with, or None."""
        call = self._call = self._stub.StreamingSubscribe()
        status = _common.StreamStatus(call)
        self._writer_error = None
        writer = None
        try:
            try:
                await call.write(pb.StreamingSubscribeRequest(subscribe=self._request))
            except asyncio.InvalidStateError:
                pass  # the call has ended already: read() raises its status
            # The server sends its headers once the subscription exists and the stream is
            # served; a refusal comes as a status alone (then read() raises it).
            await call.initial_metadata()
            if not self._opened.done() and not call.done():
                self._opened.set_result(None)
            writer = self._loop.create_task(self._write(call))
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return None
                self._backoff.reset()
                if response.dropped:
                    self.stats.dropped += response.dropped
                messages = response.messages
                if not messages:
                    if response.HasField("confirmation"):
                        self._on_confirmation(response.confirmation)
                    continue
                self.stats.responses += 1
                # More than half the window: the first half's handlers run,
                # then the writer gets a turn to send their acks before the
                # second half starts, so that the server fetches their refill
                # meanwhile (with the whole response first, one of the two
                # sides is idle at any time).
                half = max(1, self._request.max_outstanding_messages // 2)
                if len(messages) > half:
                    self._on_messages(messages[:half])
                    await asyncio.sleep(0)
                    self._on_messages(messages[half:])
                else:
                    self._on_messages(messages)
        except grpc.RpcError as err:
            return await status.error(err)
        except asyncio.CancelledError:
            if self._writer_error is None:
                raise  # this task is being cancelled
            # grpc.aio raises CancelledError from read() when the writer cancelled the call
            return RedqError(grpc.StatusCode.INTERNAL, f"writing the stream failed: {self._writer_error!r}")
        finally:
            if writer is not None:
                writer.cancel()
            self._wake = None
            self._call = None
            call.cancel()

    def _on_messages(self, received):
        due = self._loop.time() + self._extend_after
        leases = self._leases
        make = self._message_class
        messages = []
        leased = 0
        for item in received:
            message = make(item, self)
            # A delivery without an ack id (EPHEMERAL) has no lease: it is never
            # extended, acked or counted as held, so it cannot stall the window.
            if message.ack_id:
                leases[message.ack_id] = due
                leased += 1
            messages.append(message)
        self.stats.received += len(messages)
        self._window += leased
        if self._linger_timer is not None and self._window >= self._request.max_outstanding_messages / 2:
            self._kick()  # the window reached half: what lingers goes now
        if self._lease_timer is None:
            self._arm_lease_timer()
        if self._closing:
            for message in messages:
                message._settle_quietly(_NACK, 0)  # closing: give it back at once
        else:
            self._deliver(messages)

    async def _write(self, call):
        try:
            while True:
                request = self._next_request()
                if request is None:
                    if self._drained is not None and not self._drained.done():
                        self._drained.set_result(None)
                    self._wake = self._loop.create_future()
                    await self._wake
                    continue
                await call.write(request)
                self.stats.requests_sent += 1
        except grpc.RpcError:
            pass  # the reader sees the same failure
        except asyncio.InvalidStateError:
            pass  # the call ended under the write
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 (end the stream, to be reopened, rather than stall)
            log.exception("redq: writing the subscription stream failed")
            self._writer_error = err
            call.cancel()

    # ---- closing

    async def ready(self) -> None:
        """Waits until the subscription's stream is open (the subscription exists and
        the server serves it); raises the RedqError it was refused with instead.

        A failure is reported once: a subscription that fails for good (refused,
        or its token revoked) raises its RedqError from ready() (if no stream
        had opened) and wait(); only when neither is being awaited at that
        moment is it logged instead, at ERROR on the "redq" logger.
        """
        self._watchers += 1
        try:
            error = await asyncio.shield(self._opened)
        finally:
            self._watchers -= 1
        if error is not None:
            raise error

    async def wait(self) -> None:
        """Waits until the subscription is closed; raises RedqError if it failed."""
        self._watchers += 1
        try:
            error = await asyncio.shield(self._closed)
        finally:
            self._watchers -= 1
        if error is not None:
            raise error

    async def flush(self) -> None:
        """Sends the acks and nacks made so far at once and waits until the server
        confirmed it applied them, and every ack and nack sent before them.

        Raises RedqError (UNAVAILABLE) when a stream ended before the server
        confirmed some of them (they may or may not have been applied: the
        messages of those not applied are redelivered), or the error the
        subscription failed with. Whether each was applied or its lease lost:
        the futures ack() and nack() return.
        """
        if self._unknown is not None:
            error, self._unknown = self._unknown, None
            raise error
        if self._closed.done():
            error = self._closed.result()
            if error is not None:
                raise error
            return
        future = self._loop.create_future()
        self._barriers.append((f"{_BARRIER}{next(self._barrier_seq)}", future))
        self._kick()
        await future

    @property
    def closed(self) -> bool:
        return self._closed.done()

    @property
    def dropped(self) -> int:
        """EPHEMERAL topics: messages the server dropped for this subscription, in all, because it fell
        behind (its buffer of max_outstanding messages or max_outstanding_bytes was full)."""
        return self.stats.dropped

    async def close(self, timeout: Optional[float] = 30.0) -> None:
        """Stops taking messages (those not yet handed to a handler are given back),
        waits up to `timeout` seconds for running handlers, sends their acks and
        ends the stream.

        The outstanding limit drops to 1, and the last settlement is kept off
        the stream and sent by a unary call once the stream has ended: so the
        stream stays at its limit to the end and the server fetches nothing
        more for it (a message fetched but not yet sent when a stream ends
        stays leased until its ack deadline).
        """
        if self._closing:
            await asyncio.shield(self._closed)
            return
        self._closing = True
        self._flow = (1, 0)
        for message in self._take_undelivered():
            message._settle_quietly(_NACK, 0)
        self._kick()
        await self._wait_handlers(timeout)
        if self._call is not None:  # else between streams: nothing to end
            self._drained = self._loop.create_future()
            self._kick()
            try:
                await asyncio.wait_for(asyncio.shield(self._drained), 5.0)
                call = self._call
                if call is not None:
                    # The server applies what it read, then ends the stream;
                    # messages that arrive meanwhile are held back like the rest.
                    await call.done_writing()
                    await asyncio.wait_for(asyncio.shield(self._runner), 5.0)
            except (asyncio.TimeoutError, grpc.RpcError, asyncio.InvalidStateError):
                pass
        self._stop_leases()
        self._runner.cancel()
        try:
            await self._runner
        except asyncio.CancelledError:
            pass
        self._stream_ended(None)  # what a stream cut short left unconfirmed
        await self._settle_unary()
        for ack_id, future in self._confirming.items():  # none should be left: settled before the stream ended
            _resolve(future, self._settlement_error(ack_id, None))
        self._confirming = {}
        for _, future in self._barriers:
            _resolve(future)  # everything was sent and the stream ended after the server applied it
        self._barriers = []
        self._end(None)

    async def _settle_unary(self):
        """Sends what close() kept off the stream (or what a broken stream left), by unary Ack and Nack."""
        topic, subscription = self._request.topic, self._request.subscription
        calls, batches = [], []  # batches: the ack ids of each call
        for i in range(0, len(self._acks), _MAX_IDS):
            ids = self._acks[i:i + _MAX_IDS]
            calls.append(self._stub.Ack(pb.AckRequest(topic=topic, subscription=subscription, ack_ids=ids),
                                        timeout=5.0))
            batches.append(ids)
        for delay, all_ids in self._nacks.items():
            for i in range(0, len(all_ids), _MAX_IDS):
                ids = all_ids[i:i + _MAX_IDS]
                request = pb.NackRequest(topic=topic, subscription=subscription, ack_ids=ids)
                if delay is not None:
                    request.delay.CopyFrom(_common.to_duration(delay))
                calls.append(self._stub.Nack(request, timeout=5.0))
                batches.append(ids)
        self.stats.acks_sent += len(self._acks)
        self.stats.nacks_sent += sum(map(len, self._nacks.values()))
        self._acks, self._nacks = [], {}
        for ids, result in zip(batches, await asyncio.gather(*calls, return_exceptions=True)):
            error = None
            if isinstance(result, grpc.RpcError):
                error = RedqError.from_rpc_error(result)
            elif isinstance(result, Exception):
                error = RedqError(grpc.StatusCode.UNKNOWN, repr(result))
            if error is not None and error.code != grpc.StatusCode.FAILED_PRECONDITION:
                # FAILED_PRECONDITION: some leases were lost meanwhile; those messages need nothing more.
                log.warning("redq: acking or nacking after the stream ended failed: %s", error)
            # Only when no stream was open at close() do settlements someone waits for come this way: a
            # unary Ack does not tell whether a lease was lost (acking twice is not an error), so their
            # outcome is unknown.
            if error is None:
                error = RedqError(grpc.StatusCode.UNAVAILABLE, "sent by a unary call after the stream ended, "
                                  "which does not confirm it")
            for ack_id in ids:
                future = self._confirming.pop(ack_id, None)
                if future is not None:
                    _resolve(future, AckError(error.code, error.message, ack_id))


class Subscriber:
    """Creates subscriptions over one channel.

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051), or
    channel= an existing grpc.aio channel (not closed by close()).
    token, tls, tls_cert, tls_key, tls_server_name: see Publisher. A stream
    refused or ended UNAUTHENTICATED or PERMISSION_DENIED (say the token was
    revoked) is not reopened: the subscription stops and wait() raises.
    """

    def __init__(self, target: Optional[str] = None, *,
                 channel: Union[_security.Connection, grpc.aio.Channel, None] = None,
                 channel_options: Optional[ChannelOptions] = None, token: Optional[str] = None, tls: Tls = None,
                 tls_cert: Optional[Pem] = None, tls_key: Optional[Pem] = None,
                 tls_server_name: Optional[str] = None) -> None:
        self._owns_channel = channel is None
        self._channel = _security.open_channel(target, channel, is_async=True, channel_options=channel_options,
                                               token=token, tls=tls, tls_cert=tls_cert, tls_key=tls_key,
                                               tls_server_name=tls_server_name)
        self._stub = queue_pb2_grpc.QueueServiceStub(self._channel)
        self._subscriptions: list[Subscription] = []

    async def __aenter__(self) -> Subscriber:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def subscribe(self, topic: Optional[str], subscription: str, handler: Handler, *, max_outstanding: int = 100,
                  concurrency: Optional[int] = None, ack_deadline: Seconds = 30.0, ack_linger: float = 0.010,
                  consumer: str = "", start: Optional[Literal["earliest", "latest"]] = None,
                  retry_policy: Optional[Tuple[Seconds, Seconds]] = None, max_delivery_attempts: int = 0,
                  max_outstanding_bytes: int = 0, message_ordering: bool = False,
                  pattern: Optional[str] = None) -> Subscription:
        """Starts receiving; returns the running Subscription. Call inside the event loop.

        pattern: instead of a topic (pass None), a NATS-style pattern of
        EPHEMERAL topics ("sensors.*.temp", "sensors.>"): the stream gets the
        messages of every EPHEMERAL topic whose name matches, each with its
        `topic`. A topic and a pattern, or neither, is a ValueError.

        handler(message): a coroutine function or a plain function. At most
        `concurrency` (default: max_outstanding) run at once. ack_linger:
        seconds an ack or nack may wait to share a request with later ones,
        while the stream holds less than half of max_outstanding (past half,
        and on close, they go at once; 0: always at once). start:
        "earliest" or "latest" (for a subscription this call creates).
        retry_policy: (minimum, maximum) backoff in seconds. message_ordering:
        create the subscription ordered per ordering key (an existing one must
        be): the messages of one key reach the handlers one at a time, in order.
        """
        request = subscribe_request(
            topic, subscription, max_outstanding=max_outstanding, ack_deadline=ack_deadline, consumer=consumer,
            start=start, retry_policy=retry_policy, max_delivery_attempts=max_delivery_attempts,
            max_outstanding_bytes=max_outstanding_bytes, message_ordering=message_ordering, pattern=pattern)
        sub = Subscription(self._stub, request, handler, concurrency or max_outstanding,
                           asyncio.get_running_loop(), ack_linger)
        self._subscriptions.append(sub)
        return sub

    async def close(self, timeout: Optional[float] = 30.0) -> None:
        """Closes every subscription (gracefully) and the channel, if this Subscriber made it."""
        subscriptions, self._subscriptions = self._subscriptions, []
        await asyncio.gather(*(s.close(timeout) for s in subscriptions))
        if self._owns_channel:
            await self._channel.close()
