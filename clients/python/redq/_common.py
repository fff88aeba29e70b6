"""What both APIs share: the error type, time conversions and retry backoff."""

import asyncio
import datetime
import os
import random

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

DEFAULT_TARGET = "127.0.0.1:50051"

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def default_target():
    """The server address: $REDQ_ADDR (host:port), else redq dev's 127.0.0.1:50051."""
    return os.environ.get("REDQ_ADDR") or DEFAULT_TARGET


class RedqError(Exception):
    """A failed call or request: `code` is the grpc.StatusCode, `message` the server's text."""

    def __init__(self, code, message=""):
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message

    @classmethod
    def from_rpc_error(cls, err):
        code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
        details = err.details() if callable(getattr(err, "details", None)) else str(err)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "")

    @classmethod
    def from_status(cls, status):
        """From a google.rpc.Status (PublishStreamResponse.status)."""
        return cls(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), status.message)


def to_duration(value):
    """A Duration from seconds (int or float) or a datetime.timedelta."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if value < 0:
        raise ValueError(f"a duration must not be negative, got {value!r}")
    seconds = int(value)
    return Duration(seconds=seconds, nanos=int(round((value - seconds) * 1e9)))


def to_timestamp(value):
    """A Timestamp from a datetime (naive means UTC) or seconds since the epoch."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        value = value.timestamp()
    seconds = int(value // 1)
    return Timestamp(seconds=seconds, nanos=int(round((value - seconds) * 1e9)))


def from_timestamp(ts):
    """A timezone-aware UTC datetime from a Timestamp (None when unset)."""
    if not ts.seconds and not ts.nanos:
        return None
    return datetime.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=datetime.timezone.utc)


def timing_fields(delay, deliver_at):
    """The delay / deliver_at fields of a PublishMessage or a schedule request, as kwargs."""
    if delay is not None and deliver_at is not None:
        raise ValueError("give delay or deliver_at, not both")
    if delay is not None:
        return {"delay": to_duration(delay)}
    if deliver_at is not None:
        return {"deliver_at": to_timestamp(deliver_at)}
    return {}


def as_payload(payload):
    """Bytes of a payload; str is encoded as UTF-8. The server refuses empty payloads."""
    if isinstance(payload, str):
        payload = payload.encode()
    elif not isinstance(payload, bytes):
        payload = bytes(payload)
    if not payload:
        raise ValueError("payload must not be empty")
    return payload


class Backoff:
    """Exponential backoff with full jitter; reset() after a success."""

    def __init__(self, initial=0.1, maximum=5.0, multiplier=2.0):
        self.initial, self.maximum, self.multiplier = initial, maximum, multiplier
        self._next = initial

    def reset(self):
        self._next = self.initial

    def next(self):
        delay = self._next
        self._next = min(self._next * self.multiplier, self.maximum)
        return random.uniform(delay / 2, delay)


def backoff_delay(attempt, initial=0.1, maximum=5.0):
    """The jittered delay before retry number `attempt` (1, 2, ...) of one request."""
    delay = min(initial * 2 ** (attempt - 1), maximum)
    return random.uniform(delay / 2, delay)


# Stream-level failures after which a client reopens its stream. Anything else
# (UNIMPLEMENTED, INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED…) is
# final: a missing, unknown or revoked token or a missing grant does not fix
# itself by retrying.
RETRYABLE_STREAM_CODES = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
})


# What grpc.aio reports for a write that failed in its core: see StreamStatus.
_CORE_INTERNAL = "Internal error from Core"


def _result_now(coroutine):
    """The result of a coroutine that finishes without suspending (else None)."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    coroutine.close()
    return None


class StreamStatus:
    """The status a grpc.aio stream ended with, as the server sent it.

    When the server ends a stream (say UNAUTHENTICATED, at once, or a token
    revoked) while a write is on its way, grpc.aio's write fails in the core
    and it overwrites the call's status with INTERNAL "Internal error from
    Core", before or after the server's status arrives: the stream would
    seem retryable. A done callback, which grpc.aio calls on every status
    set, keeps the first other status; error() prefers it.
    """

    __slots__ = ("_status", "_arrived")

    def __init__(self, call):
        self._status = None
        self._arrived = None  # future error() waits on for the server's status
        call.add_done_callback(self._on_done)

    def _on_done(self, call):
        if self._status is not None:
            return
        try:
            # code() and details() of a finished call finish at once: read them now, before anything overwrites them.
            code, details = _result_now(call.code()), _result_now(call.details())
        except Exception:  # noqa: BLE001 (never fail inside grpc's callback)
            return
        if code is not None and details != _CORE_INTERNAL:
            self._status = (code, details or "")
            resolve_once(self._arrived)

    async def error(self, err, timeout=1.0):
        """The RedqError of an RpcError the call raised."""
        error = RedqError.from_rpc_error(err)
        if error.code != grpc.StatusCode.INTERNAL or error.message != _CORE_INTERNAL:
            return error
        if self._status is None:
            self._arrived = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._arrived, timeout)
            except asyncio.TimeoutError:
                return error
        return RedqError(*self._status)


def channel_options(extra=None):
    """Channel options of every redq channel: no receive limit, since the server
    bounds its responses itself (a SubscribeResponse may carry several 1 MiB messages)."""
    options = {"grpc.max_receive_message_length": -1}
    options.update(dict(extra or ()))
    return list(options.items())


def resolve_once(future):
    """Resolves an asyncio future a waiting writer sleeps on, unless it is
    already done (it may have been cancelled)."""
    if future is not None and not future.done():
        future.set_result(None)
