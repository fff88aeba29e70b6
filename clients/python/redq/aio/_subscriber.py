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
"""

import asyncio
import logging
from collections import deque

import grpc

from .. import _common, _security
from .._common import RedqError
from .._proto import queue_pb2 as pb
from .._proto import queue_pb2_grpc

log = logging.getLogger("redq")

_ACK, _NACK = 1, 2
# Ids per field of one request, well under the server's --max-outstanding-limit.
_MAX_IDS = 2500


class Message:
    """A delivered message. Call ack() or nack(delay) once; a handler that returns
    acks implicitly and one that raises nacks.

    Attributes: id, payload (bytes), attributes (dict), ordering_key,
    publish_time and deliver_at (UTC datetimes), delivery_attempt (1 first),
    ack_id.
    """

    __slots__ = ("_received", "_subscription", "ack_id", "_settled", "_attributes")

    def __init__(self, received, subscription):
        self._received = received
        self._subscription = subscription
        self.ack_id = received.ack_id
        self._settled = False
        self._attributes = None

    @property
    def id(self):
        return self._received.message.id

    @property
    def payload(self):
        return self._received.message.payload

    @property
    def attributes(self):
        if self._attributes is None:
            self._attributes = dict(self._received.message.attributes)
        return self._attributes

    @property
    def ordering_key(self):
        return self._received.message.ordering_key

    @property
    def publish_time(self):
        return _common.from_timestamp(self._received.message.publish_time)

    @property
    def deliver_at(self):
        return _common.from_timestamp(self._received.message.deliver_at)

    @property
    def delivery_attempt(self):
        return self._received.delivery_attempt

    @property
    def settled(self):
        """True once ack() or nack() was called."""
        return self._settled

    def ack(self):
        """Marks the message done (sent batched on the stream)."""
        if not self._settled:
            self._settled = True
            self._subscription._settle(self.ack_id, _ACK, None)

    def nack(self, delay=None):
        """Gives the message back: redelivered after delay (seconds or timedelta),
        or after the subscription's retry backoff when delay is None."""
        if not self._settled:
            if delay is not None:
                if not isinstance(delay, (int, float)):
                    delay = delay.total_seconds()
                if delay < 0:
                    raise ValueError(f"nack delay must not be negative, got {delay!r}")
            self._settled = True
            self._subscription._settle(self.ack_id, _NACK, delay)

    def __repr__(self):
        return f"Message(id={self.id!r}, attempt={self.delivery_attempt}, payload={self.payload[:40]!r})"


class SubscriptionStats:
    """Counters of a Subscription, for tests and benchmarks."""

    __slots__ = ("received", "responses", "acked", "nacked", "extended", "requests", "reconnects", "handler_errors")

    def __init__(self):
        self.received = 0  # messages delivered (redeliveries included)
        self.responses = 0  # SubscribeResponses that carried them
        self.acked = 0  # ack ids sent
        self.nacked = 0  # nack ids sent
        self.extended = 0  # lease extensions sent (modify_deadline ids)
        self.requests = 0  # requests written after the first
        self.reconnects = 0  # streams reopened after one broke
        self.handler_errors = 0  # handlers that raised

    def __repr__(self):
        return "SubscriptionStats(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__) + ")"


def subscribe_request(topic, subscription, *, max_outstanding, ack_deadline, consumer="", start=None,
                      retry_policy=None, max_delivery_attempts=0, max_outstanding_bytes=0, message_ordering=False):
    """The SubscribeRequest opening a stream. retry_policy: (minimum, maximum) backoff in seconds."""
    request = pb.SubscribeRequest(
        topic=topic, subscription=subscription, consumer=consumer,
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
        if result is not None and hasattr(result, "__await__"):
            task = self._loop.create_task(self._finish(message, result))
            self._spawned.add(task)
            task.add_done_callback(self._spawned.discard)
        else:
            message.ack()

    async def _finish(self, message, awaitable):
        try:
            await awaitable
        except Exception:  # noqa: BLE001
            self._handler_failed(message)
        else:
            message.ack()

    def _handler_failed(self, message):
        self.stats.handler_errors += 1
        log.exception("redq: handler failed on message %s; nacking it", message.id)
        message.nack()

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
                    message.ack()
                continue
            if self._closing:
                return
            future = self._loop.create_future()
            self._idle.append(future)
            await future

    # ---- settlements

    def _settle(self, ack_id, kind, delay):
        """Queues an ack or a nack for the writer (called in the loop's thread)."""
        self._leases.pop(ack_id, None)
        if kind is _ACK:
            self._acks.append(ack_id)
        else:
            ids = self._nacks.get(delay)
            if ids is None:
                self._nacks[delay] = [ack_id]
            else:
                ids.append(ack_id)
        self._schedule_send()

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

    def set_flow_control(self, max_outstanding=0, max_outstanding_bytes=0):
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
        """Closing, no message held any more: keeps one settlement off the stream (see close())."""
        if self._acks:
            return _ACK, None, self._acks.pop()
        for delay, ids in self._nacks.items():
            ack_id = ids.pop()
            if not ids:
                del self._nacks[delay]
            return _NACK, delay, ack_id
        return None

    def _build_request(self):
        acks, nacks, modifies = self._acks, self._nacks, self._modifies
        if not (acks or nacks or modifies or self._flow):
            return None
        request = pb.StreamingSubscribeRequest()
        if acks:
            if len(acks) > _MAX_IDS:
                request.ack_ids.extend(acks[:_MAX_IDS])
                del acks[:_MAX_IDS]
            else:
                request.ack_ids.extend(acks)
                self._acks = []
            self.stats.acked += len(request.ack_ids)
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
            self.stats.nacked += len(request.nack_ids)
        settled = len(request.ack_ids) + len(request.nack_ids)
        if settled:
            self._window -= settled
            if self._linger_timer is not None:  # what lingered goes in this request
                self._linger_timer.cancel()
                self._linger_timer = None
        if modifies:
            live = [a for a in modifies[:_MAX_IDS] if a in self._leases]  # settled since: skip
            del modifies[:_MAX_IDS]
            if live:
                request.modify_deadline_ack_ids.extend(live)
                request.modify_deadline.CopyFrom(self._deadline)
                self.stats.extended += len(live)
        if self._flow:
            request.max_outstanding_messages, request.max_outstanding_bytes = self._flow
            self._flow = None
        elif not (request.ack_ids or request.nack_ids or request.modify_deadline_ack_ids):
            return None  # only extensions of leases settled since
        return request

    # ---- the stream

    async def _run(self):
        error = None
        try:
            while True:
                error = await self._stream()
                if self._closing:
                    error = None
                    return
                if error is not None and error.code not in _common.RETRYABLE_STREAM_CODES:
                    log.error("redq: subscription %s/%s failed: %s", self._request.topic,
                              self._request.subscription, error)
                    return
                self.stats.reconnects += 1
                await asyncio.sleep(self._backoff.next())
        finally:
            if not self._closing:
                # Failed: take no more messages; those held are redelivered after their deadline.
                self._closing = True
                for message in self._take_undelivered():
                    message._settled = True
                self._stop_leases()
                self._wake_idle()
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
            writer = self._loop.create_task(self._write(call))
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return None
                self._backoff.reset()
                messages = response.messages
                if not messages:
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
        messages = []
        for item in received:
            message = Message(item, self)
            leases[message.ack_id] = due
            messages.append(message)
        self.stats.received += len(messages)
        self._window += len(messages)
        if self._linger_timer is not None and self._window >= self._request.max_outstanding_messages / 2:
            self._kick()  # the window reached half: what lingers goes now
        if self._lease_timer is None:
            self._arm_lease_timer()
        if self._closing:
            for message in messages:
                message.nack(0)  # closing: give it back at once
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
                self.stats.requests += 1
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

    async def wait(self):
        """Waits until the subscription is closed; raises RedqError if it failed."""
        error = await asyncio.shield(self._closed)
        if error is not None:
            raise error

    @property
    def closed(self):
        return self._closed.done()

    async def close(self, timeout=30.0):
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
            message.nack(0)
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
        await self._settle_unary()
        if not self._closed.done():
            self._closed.set_result(None)

    async def _settle_unary(self):
        """Sends what close() kept off the stream (or what a broken stream left), by unary Ack and Nack."""
        topic, subscription = self._request.topic, self._request.subscription
        calls = []
        for i in range(0, len(self._acks), _MAX_IDS):
            request = pb.AckRequest(topic=topic, subscription=subscription, ack_ids=self._acks[i:i + _MAX_IDS])
            calls.append(self._stub.Ack(request, timeout=5.0))
        for delay, ids in self._nacks.items():
            for i in range(0, len(ids), _MAX_IDS):
                request = pb.NackRequest(topic=topic, subscription=subscription, ack_ids=ids[i:i + _MAX_IDS])
                if delay is not None:
                    request.delay.CopyFrom(_common.to_duration(delay))
                calls.append(self._stub.Nack(request, timeout=5.0))
        self.stats.acked += len(self._acks)
        self.stats.nacked += sum(map(len, self._nacks.values()))
        self._acks, self._nacks = [], {}
        for result in await asyncio.gather(*calls, return_exceptions=True):
            # FAILED_PRECONDITION: some leases were lost meanwhile; those messages need nothing more.
            if isinstance(result, Exception) and not (
                    isinstance(result, grpc.RpcError) and result.code() == grpc.StatusCode.FAILED_PRECONDITION):
                log.warning("redq: acking or nacking after the stream ended failed: %s", result)


class Subscriber:
    """Creates subscriptions over one channel.

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051), or
    channel= an existing grpc.aio channel (not closed by close()).
    token, tls, tls_cert, tls_key, tls_server_name: see Publisher. A stream
    refused or ended UNAUTHENTICATED or PERMISSION_DENIED (say the token was
    revoked) is not reopened: the subscription stops and wait() raises.
    """

    def __init__(self, target=None, *, channel=None, channel_options=None, token=None, tls=None, tls_cert=None,
                 tls_key=None, tls_server_name=None):
        self._owns_channel = channel is None
        self._channel = _security.open_channel(target, channel, is_async=True, channel_options=channel_options,
                                               token=token, tls=tls, tls_cert=tls_cert, tls_key=tls_key,
                                               tls_server_name=tls_server_name)
        self._stub = queue_pb2_grpc.QueueServiceStub(self._channel)
        self._subscriptions = []

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def subscribe(self, topic, subscription, handler, *, max_outstanding=100, concurrency=None, ack_deadline=30.0,
                  ack_linger=0.010, consumer="", start=None, retry_policy=None, max_delivery_attempts=0,
                  max_outstanding_bytes=0, message_ordering=False):
        """Starts receiving; returns the running Subscription. Call inside the event loop.

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
            max_outstanding_bytes=max_outstanding_bytes, message_ordering=message_ordering)
        sub = Subscription(self._stub, request, handler, concurrency or max_outstanding,
                           asyncio.get_running_loop(), ack_linger)
        self._subscriptions.append(sub)
        return sub

    async def close(self, timeout=30.0):
        """Closes every subscription (gracefully) and the channel, if this Subscriber made it."""
        subscriptions, self._subscriptions = self._subscriptions, []
        await asyncio.gather(*(s.close(timeout) for s in subscriptions))
        if self._owns_channel:
            await self._channel.close()
