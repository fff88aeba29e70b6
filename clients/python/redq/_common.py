"""What both APIs share: the error types, payload and time conversions, retry backoff,
and the type aliases of the public signatures."""

from __future__ import annotations

import asyncio
import datetime
import os
import random
from typing import Any, Iterable, Mapping, Optional, Union

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

DEFAULT_TARGET = "127.0.0.1:50051"

# The types the public signatures take.
Payload = Union[bytes, bytearray, memoryview]
"""A message's payload: bytes-like (a str is refused: encode text yourself)."""
Seconds = Union[float, datetime.timedelta]
"""A duration: a number of seconds (int or float) or a datetime.timedelta."""
Time = Union[datetime.datetime, float]
"""A point in time: a datetime (naive means UTC) or seconds since the epoch."""
ChannelOptions = Union[Mapping[str, Any], Iterable["tuple[str, Any]"]]
"""Extra gRPC channel options: a mapping or (name, value) pairs."""

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def default_target() -> str:
    """The server address: $REDQ_ADDR (host:port), else redq dev's 127.0.0.1:50051."""
    return os.environ.get("REDQ_ADDR") or DEFAULT_TARGET


class RedqError(Exception):
    """A failed call or request: `code` is the grpc.StatusCode, `message` the server's text."""

    def __init__(self, code: grpc.StatusCode, message: str = "") -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message

    @classmethod
    def from_rpc_error(cls, err: Any) -> RedqError:
        code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
        details = err.details() if callable(getattr(err, "details", None)) else str(err)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "")

    @classmethod
    def from_status(cls, status: Any) -> RedqError:
        """From a google.rpc.Status (PublishStreamResponse.status)."""
        return cls(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), status.message)


class AckError(RedqError):
    """An ack or nack the server did not apply. `code` says why:
    FAILED_PRECONDITION: the lease was lost (the delivery was acked, nacked or
    redelivered since, e.g. after its ack deadline); INVALID_ARGUMENT: not an
    ack id of this subscription; UNAVAILABLE: the stream ended before the
    server confirmed it (it may or may not have been applied); or the error
    the subscription failed with. `ack_id` is the delivery's ack id."""

    def __init__(self, code: grpc.StatusCode, message: str = "", ack_id: str = "") -> None:
        super().__init__(code, message)
        self.ack_id = ack_id


class FlowControlError(RedqError):
    """A publish over the Publisher's flow-control limits with
    limit_exceeded="raise" (code RESOURCE_EXHAUSTED; nothing was queued)."""

    def __init__(self, message: str) -> None:
        super().__init__(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def seconds(value: Seconds, name: str = "duration") -> float:
    """Seconds (float) of a duration given as a number of seconds or a datetime.timedelta."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"redq: {name} must be a number of seconds or a datetime.timedelta, "
                        f"not {type(value).__name__}")
    return value


def to_duration(value: Seconds, name: str = "duration") -> Duration:
    """A Duration from seconds (int or float) or a datetime.timedelta."""
    value = seconds(value, name)
    if value < 0:
        raise ValueError(f"a duration must not be negative, got {value!r}")
    whole = int(value)
    return Duration(seconds=whole, nanos=int(round((value - whole) * 1e9)))


def from_duration(duration: Duration) -> datetime.timedelta:
    """A datetime.timedelta from a Duration."""
    return datetime.timedelta(seconds=duration.seconds, microseconds=duration.nanos // 1000)


def to_timestamp(value: Time, name: str = "time") -> Timestamp:
    """A Timestamp from a datetime (naive means UTC) or seconds since the epoch."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        value = value.timestamp()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"redq: {name} must be a datetime or seconds since the epoch, not {type(value).__name__}")
    whole = int(value // 1)
    return Timestamp(seconds=whole, nanos=int(round((value - whole) * 1e9)))


def from_timestamp(ts: Timestamp) -> Optional[datetime.datetime]:
    """A timezone-aware UTC datetime from a Timestamp (None when unset)."""
    if not ts.seconds and not ts.nanos:
        return None
    return datetime.datetime.fromtimestamp(ts.seconds, tz=datetime.timezone.utc) + datetime.timedelta(
        microseconds=ts.nanos // 1000)


def timing_fields(delay, deliver_at):
    """The delay / deliver_at fields of a PublishMessage or a schedule request, as kwargs."""
    if delay is not None and deliver_at is not None:
        raise ValueError("give delay or deliver_at, not both")
    if delay is not None:
        return {"delay": to_duration(delay)}
    if deliver_at is not None:
        return {"deliver_at": to_timestamp(deliver_at)}
    return {}


def as_payload(payload: Payload) -> bytes:
    """The bytes of a payload: bytes, bytearray or memoryview (anything else is
    a TypeError, a str included: encode text yourself). The server refuses
    empty payloads (a ValueError here)."""
    if payload.__class__ is not bytes:
        if isinstance(payload, (bytearray, memoryview)):
            payload = bytes(payload)
        elif not isinstance(payload, bytes):
            hint = " (encode text first, e.g. text.encode())" if isinstance(payload, str) else ""
            raise TypeError(f"redq: payload must be bytes, bytearray or memoryview, not {type(payload).__name__}"
                            f"{hint}")
    if not payload:
        raise ValueError("redq: payload must not be empty")
    return payload


def check_options(given, known, what):
    """Raises TypeError naming the options in `given` that are not `known`, and the known ones."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"redq: {what} got unknown option{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(map(repr, unknown))}; known: {', '.join(sorted(known))}")


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
