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
"""

import asyncio
import base64
import concurrent.futures
import itertools
import os
import re
from collections import deque

import grpc

from .. import _common, _security
from .._common import RedqError
from .._proto import queue_pb2 as pb
from .._proto import queue_pb2_grpc

# Indices into an entry, the tuple one publish() leaves in a pending list:
# (payload, dedupe_id, extra PublishMessage fields or None, sink, index in a
#  batch, flush epoch, estimated encoded size). A sink is the caller's future
# (asyncio or concurrent.futures) or a _Batch.
_PAYLOAD, _DEDUPE, _EXTRA, _SINK, _INDEX, _EPOCH, _SIZE = range(7)
# Encoded bytes of a message besides its payload and dedupe id (tags, lengths).
_OVERHEAD = 16
_INVALID_STATE = (asyncio.InvalidStateError, concurrent.futures.InvalidStateError)
# "messages[3].payload: must not be empty": the server names the bad message.
_BAD_MESSAGE = re.compile(r"messages\[(\d+)\]")


class _StreamBroken(Exception):
    """Raised inside the reader to end a stream as if its connection dropped."""


class PublisherStats:
    """Counters of a Publisher, for tests and benchmarks."""

    __slots__ = ("requests", "messages", "retries", "duplicates", "reconnects")

    def __init__(self):
        self.requests = 0  # PublishStream requests written (retries included)
        self.messages = 0  # messages in those requests
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

    __slots__ = ("topic", "entries", "proto", "first_sent", "attempts")

    def __init__(self, topic, entries, proto):
        self.topic, self.entries, self.proto = topic, entries, proto
        self.first_sent = None
        self.attempts = 0


class Publisher:
    """Publishes messages over a PublishStream, batching and retrying.

    Create it inside a running event loop (``async with Publisher() as pub:``).

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051), or pass
        channel= an existing grpc.aio channel (not closed by close()).
    max_batch_messages, max_batch_bytes: bounds of one request (server
        default: at most 1000 messages per request).
    linger: seconds a batch that is not full may wait for more messages while
        other requests are in flight (0: leave as soon as a slot is free).
    max_in_flight: requests on the stream unanswered at once.
    retry_timeout: seconds after its first send that a request stops being
        retried; its messages then fail with the last error.
    auto_dedupe: give each request a dedupe_id, so that retries cannot
        duplicate its messages.
    token: sent as `authorization: Bearer <token>` on the stream.
    tls: True (system roots), a root CA (PEM bytes or path) or a
        grpc.ChannelCredentials; default plaintext. tls_cert, tls_key: a client
        certificate and its key (PEM bytes or paths), for mTLS.
        tls_server_name: the name the server's certificate is checked against,
        when it is not the target's host.
    A request refused UNAUTHENTICATED or PERMISSION_DENIED is not retried: its
    futures fail with that RedqError (the whole stream refused: all pending ones).
    """

    def __init__(self, target=None, *, channel=None, max_batch_messages=1000, max_batch_bytes=3 * 1024 * 1024,
                 linger=0.0, max_in_flight=8, retry_timeout=60.0, auto_dedupe=True, channel_options=None,
                 token=None, tls=None, tls_cert=None, tls_key=None, tls_server_name=None):
        if max_batch_messages < 1 or max_batch_bytes < 1 or max_in_flight < 1:
            raise ValueError("max_batch_messages, max_batch_bytes and max_in_flight must be at least 1")
        self._owns_channel = channel is None
        self._channel = _security.open_channel(target, channel, is_async=True, channel_options=channel_options,
                                               token=token, tls=tls, tls_cert=tls_cert, tls_key=tls_key,
                                               tls_server_name=tls_server_name)
        self._stub = queue_pb2_grpc.QueueServiceStub(self._channel)
        self._max_messages = max_batch_messages
        self._max_bytes = max_batch_bytes
        self._linger = linger
        self._max_in_flight = max_in_flight
        self._retry_timeout = retry_timeout
        self._auto_dedupe = auto_dedupe
        self._dedupe_prefix = base64.urlsafe_b64encode(os.urandom(12)).decode() + "."
        self._dedupe_seq = itertools.count()
        self._loop = None
        self._pending = {}  # topic -> entries not yet sent, in publish order
        self._since = {}  # topic -> loop time of its oldest pending entry (for linger)
        self._ready = deque()  # topics with pending entries, served in turn
        self._retry = deque()  # _Requests to send again, oldest first
        self._waiting = set()  # _Requests sleeping out a backoff before their resend
        self._inflight = {}  # request_id -> _Request written, unanswered
        self._request_ids = itertools.count(1)
        self._epoch = 0  # flush() ends an epoch: it waits for the entries of those before
        self._open = {}  # epoch -> its entries not yet answered
        self._flushes = []  # (epoch, future) of flush() calls waiting
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

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # ---- publishing

    def publish(self, topic, payload, *, attributes=None, ordering_key="", dedupe_id=None, delay=None,
                deliver_at=None):
        """Queues one message; returns an asyncio.Future of its message id.

        payload: bytes (str is encoded as UTF-8), not empty. delay (seconds or
        timedelta) or deliver_at (datetime or epoch seconds) schedule it. The
        future fails with RedqError (carrying the gRPC code) if the server
        refuses the message.
        """
        future = (self._loop or self._bind_loop()).create_future()
        self._add(topic, self._entry(payload, attributes, ordering_key, dedupe_id, delay, deliver_at, future, 0))
        return future

    def publish_batch(self, topic, payloads, *, attributes=None, ordering_key="", delay=None, deliver_at=None):
        """Queues many messages (same attributes for all); returns one future of their ids, in order.

        Cheaper than a publish() per message: one future for the lot. The
        messages still share requests with other publishes of the topic.
        """
        future = (self._loop or self._bind_loop()).create_future()
        entries = self._batch_entries(payloads, attributes, ordering_key, delay, deliver_at, future)
        if entries:
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
        epoch, as_payload = self._epoch, _common.as_payload
        entries = []
        for i, payload in enumerate(payloads):
            if payload.__class__ is not bytes or not payload:
                payload = as_payload(payload)
            entries.append((payload, "", None, batch, i, epoch, len(payload) + _OVERHEAD))
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
        return (payload, dedupe_id, extra, sink, index, self._epoch, size)

    def _bind_loop(self):
        self._loop = asyncio.get_running_loop()
        return self._loop

    def _add(self, topic, entry):
        epoch = entry[_EPOCH]
        self._open[epoch] = self._open.get(epoch, 0) + 1
        entries = self._pending.get(topic)
        if entries is None:
            entries = self._pending[topic] = []
            self._ready.append(topic)
            if self._linger:
                self._since[topic] = self._loop.time()
        entries.append(entry)
        self._kick()

    def _add_many(self, topic, new):
        """_add() for entries of one epoch (a batch)."""
        epoch = new[0][_EPOCH]
        self._open[epoch] = self._open.get(epoch, 0) + len(new)
        entries = self._pending.get(topic)
        if entries is None:
            self._pending[topic] = list(new)
            self._ready.append(topic)
            if self._linger:
                self._since[topic] = self._loop.time()
        else:
            entries.extend(new)
        self._kick()

    def _kick(self):
        """Wakes the writer (it runs on the next turn of the loop), or starts a stream."""
        wake, self._wake = self._wake, None
        if wake is not None:
            _common.resolve_once(wake)
        elif self._runner is None and not self._closing:
            self._runner = self._loop.create_task(self._run())

    async def flush(self):
        """Waits until every message published before this call is answered."""
        epoch = self._epoch
        self._epoch += 1
        if any(e <= epoch for e in self._open):
            future = (self._loop or self._bind_loop()).create_future()
            self._flushes.append((epoch, future))
            await future

    async def close(self):
        """Flushes, ends the stream and closes the channel (if this Publisher made it)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._loop is not None:
                await self.flush()
        finally:
            self._closing = True
            runner = self._runner
            if runner is not None:
                call = self._call
                try:
                    if call is not None:
                        await call.done_writing()
                    await asyncio.wait_for(asyncio.shield(runner), 5.0)
                except (asyncio.TimeoutError, grpc.RpcError):
                    pass
                finally:
                    runner.cancel()
            if self._owns_channel:
                await self._channel.close()

    # ---- the stream

    async def _run(self):
        """Runs one stream after another while there is something to send."""
        try:
            while True:
                error = await self._stream()
                lost = sorted(self._inflight.items())
                self._inflight.clear()
                self._retry.extendleft(rec for _, rec in reversed(lost))
                if self._closing:
                    return
                if error is not None and error.code not in _common.RETRYABLE_STREAM_CODES:
                    self._fail_everything(error)
                    return
                self._expire_retries(error)
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
                await call.write(request.proto)
                self.stats.requests += 1
                self.stats.messages += len(request.entries)
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
        if request.first_sent is None:
            request.first_sent = self._loop.time()
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
            if self._auto_dedupe:
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
        if code == grpc.StatusCode.UNAVAILABLE and not self._closing and not self._expired(request):
            request.attempts += 1
            self._waiting.add(request)

            def resend():
                self._waiting.discard(request)
                self._retry.append(request)
                self._kick()
            self._loop.call_later(_common.backoff_delay(request.attempts), resend)
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
        """Resolves (ids) or rejects (error) the sinks of entries and counts them out of their epochs."""
        open_ = self._open
        closed_epoch = False
        for i, entry in enumerate(entries):
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

    def _expired(self, request):
        return request.first_sent is not None and self._loop.time() - request.first_sent > self._retry_timeout

    def _expire_retries(self, error):
        keep = deque()
        for request in self._retry:
            if self._expired(request):
                self._finish(request.entries, None, error or RedqError(grpc.StatusCode.UNAVAILABLE, "stream ended"))
            else:
                keep.append(request)
        self._retry = keep

    def _fail_everything(self, error):
        for request in self._retry:
            self._finish(request.entries, None, error)
        self._retry.clear()
        for topic in list(self._ready):
            self._finish(self._pending.pop(topic), None, error)
        self._ready.clear()
        self._since.clear()
