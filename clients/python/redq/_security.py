"""The channels of Publishers, Subscribers and Clients: plaintext or TLS (mTLS), with or without a token.

Every entry point takes the same keyword options and hands them to
open_channel():

    token            str: sent as `authorization: Bearer <token>` on every call and stream.
    tls              None/False: plaintext (the default); True: TLS verified with the
                     system's roots; PEM bytes, or the path of a PEM file: TLS verified
                     with that root CA; or a grpc.ChannelCredentials, used as it is.
    tls_cert         client certificate chain (PEM bytes or path), for mTLS; with tls_key.
    tls_key          its private key (PEM bytes or path).
    tls_server_name  the name the server's certificate must carry when it is not the
                     target's host (e.g. "localhost" for a target "10.0.0.7:50051").

With TLS the token travels as gRPC call credentials
(grpc.access_token_call_credentials), so it covers every call on the channel,
the raw stubs' included. gRPC sends call credentials over TLS only; on a
plaintext channel an interceptor adds the same header instead (readable by
anyone on the network: use TLS). The token is never logged nor shown in a repr.
"""

from __future__ import annotations

import collections
import os
from typing import Any, Optional, Union

import grpc
import grpc.aio

from . import _common
from ._common import ChannelOptions

Pem = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]
"""PEM data: bytes, a PEM string, or the path of a PEM file."""
Tls = Union[None, bool, Pem, grpc.ChannelCredentials]
"""tls=: None/False plaintext, True system roots, a root CA (Pem), or credentials as they are."""

_PEM_BEGIN = "-----BEGIN"


def _pem(value, option):
    """PEM bytes from bytes, a PEM string, or the path of a PEM file."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str) and value.lstrip().startswith(_PEM_BEGIN):
        return value.encode()
    if isinstance(value, (str, os.PathLike)):
        with open(value, "rb") as f:
            return f.read()
    raise TypeError(f"redq: {option} must be PEM bytes or the path of a PEM file, not {type(value).__name__}")


def _channel_credentials(tls, tls_cert, tls_key):
    """The channel credentials the TLS options ask for; None: plaintext."""
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("redq: tls_cert and tls_key go together (the client certificate and its key, for mTLS)")
    if isinstance(tls, grpc.ChannelCredentials):
        if tls_cert is not None:
            raise ValueError("redq: tls= is a grpc.ChannelCredentials: put the client certificate in it")
        return tls
    if tls is None or tls is False:
        if tls_cert is not None:
            raise ValueError("redq: tls_cert and tls_key need TLS: tls=True (system roots) or tls=<root CA>")
        return None
    root = None if tls is True else _pem(tls, "tls")
    if tls_cert is None:
        return grpc.ssl_channel_credentials(root_certificates=root)
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=_pem(tls_key, "tls_key"),
                                        certificate_chain=_pem(tls_cert, "tls_cert"))


def open_channel(target: Optional[str], channel: Any = None, *, is_async: bool,
                 channel_options: Optional[ChannelOptions] = None, token: Optional[str] = None, tls: Tls = None,
                 tls_cert: Optional[Pem] = None, tls_key: Optional[Pem] = None,
                 tls_server_name: Optional[str] = None) -> Any:
    """The channel of a Publisher, Subscriber or Client.

    `channel` itself when given (the caller configured it: then none of the
    security options may be given), else a new grpc.aio (is_async) or grpc
    channel to `target` (default $REDQ_ADDR, else 127.0.0.1:50051). See the
    module's docstring for the options.
    """
    if channel is not None:
        given = [name for name, value in (("token", token), ("tls", tls), ("tls_cert", tls_cert),
                                          ("tls_key", tls_key), ("tls_server_name", tls_server_name),
                                          ("channel_options", channel_options))
                 if value is not None and value is not False]
        if given:
            raise ValueError(f"redq: {', '.join(given)} configure a channel redq makes; "
                             "with channel= configure that channel instead (see connect())")
        if isinstance(channel, Connection):
            channel = channel.channel
        return channel
    if token is not None and (not isinstance(token, str) or not token):
        raise TypeError("redq: token must be a non-empty str")
    target = target or _common.default_target()
    credentials = _channel_credentials(tls, tls_cert, tls_key)
    extra = []
    if tls_server_name:
        if credentials is None:
            raise ValueError("redq: tls_server_name needs TLS: tls=True (system roots) or tls=<root CA>")
        extra.append(("grpc.ssl_target_name_override", tls_server_name))
    options = _common.channel_options(extra + list(dict(channel_options or ()).items()))
    module = grpc.aio if is_async else grpc
    if credentials is not None:
        if token is not None:
            credentials = grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(token))
        return module.secure_channel(target, credentials, options=options)
    if token is None:
        return module.insecure_channel(target, options=options)
    # Plaintext with a token: gRPC refuses call credentials on an insecure channel.
    header = (("authorization", "Bearer " + token),)
    if is_async:
        # grpc.aio files an interceptor under its first matching type only: one object per kind of call.
        interceptors = [cls(header) for cls in (_AioUnaryUnary, _AioUnaryStream, _AioStreamUnary, _AioStreamStream)]
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return grpc.intercept_channel(grpc.insecure_channel(target, options=options), _SyncBearer(header))


class Connection:
    """A grpc.aio channel made with redq's options (receive size, token, TLS),
    to share among Publishers, Subscribers and Clients: pass it as their
    `channel=`. They do not close it; close() does (or leaving `async with`).
    Made by redq.aio.connect(); `channel` is the grpc.aio.Channel itself."""

    def __init__(self, channel: grpc.aio.Channel, target: str) -> None:
        self.channel = channel
        self.target = target

    def __repr__(self) -> str:
        return f"Connection({self.target!r})"

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()


def connect(target: Optional[str] = None, *, channel_options: Optional[ChannelOptions] = None,
            token: Optional[str] = None, tls: Tls = None, tls_cert: Optional[Pem] = None,
            tls_key: Optional[Pem] = None, tls_server_name: Optional[str] = None) -> Connection:
    """One channel to redq for a Publisher, a Subscriber and a Client to share (in a running event loop).

    target: "host:port" (default $REDQ_ADDR, else 127.0.0.1:50051). The
    options are those every entry point takes (see the module's docstring);
    channel_options: extra gRPC channel options. Returns a Connection.
    """
    target = target or _common.default_target()
    return Connection(open_channel(target, is_async=True, channel_options=channel_options, token=token, tls=tls,
                                   tls_cert=tls_cert, tls_key=tls_key, tls_server_name=tls_server_name), target)


# ---- the header on a plaintext channel


class _CallDetails(collections.namedtuple("_CallDetails", "method timeout metadata credentials wait_for_ready "
                                                          "compression"), grpc.ClientCallDetails):
    pass


class _SyncBearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the authorization header to every call of a (sync) grpc channel."""

    __slots__ = ("_header",)

    def __init__(self, header):
        self._header = header

    def __repr__(self):
        return "_SyncBearer(<token>)"

    def _details(self, details):
        return _CallDetails(details.method, details.timeout, tuple(details.metadata or ()) + self._header,
                            details.credentials, getattr(details, "wait_for_ready", None),
                            getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


class _AioBearer:
    __slots__ = ("_header",)

    def __init__(self, header):
        self._header = header

    def __repr__(self):
        return f"{type(self).__name__}(<token>)"

    def _details(self, details):
        metadata = grpc.aio.Metadata(*tuple(details.metadata or ()), *self._header)
        return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                          details.wait_for_ready)


class _AioUnaryUnary(_AioBearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._details(details), request)


class _AioUnaryStream(_AioBearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._details(details), request)


class _AioStreamUnary(_AioBearer, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, request_iterator):
        return await continuation(self._details(details), request_iterator)


class _AioStreamStream(_AioBearer, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):
        return await continuation(self._details(details), request_iterator)
