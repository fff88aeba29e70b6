"""redq's Python client library.

Synchronous API (this module): Publisher (publish() returns a
concurrent.futures.Future), Subscriber (handlers in a thread pool), Client
(schedule, cancel, reschedule, and the AdminService as snake_case methods
returning redq.admin's dataclasses). The same in asyncio: redq.aio.
Failures raise RedqError, which carries the gRPC status code.

    import redq
    with redq.Publisher() as publisher:           # $REDQ_ADDR, else 127.0.0.1:50051
        print(publisher.publish("orders", b"hello").result())

Every Publisher, Subscriber and Client takes token= (a bearer token) and
tls= (True, or a root CA as PEM bytes or a path), tls_cert=/tls_key= (mTLS)
and tls_server_name=; the default is plaintext without a token. connect()
makes one channel with those options for several of them to share
(channel=).

The generated stubs are importable as redq.queue_pb2, redq.admin_pb2 (and
their *_grpc modules); they are committed in redq.v1 (clients/python/generate.py
writes them), so importing redq generates and writes nothing. The package is
typed (py.typed).
"""

__version__ = "0.1.0"

from ._common import AckError, FlowControlError, RedqError
from .v1 import admin_pb2, admin_pb2_grpc, queue_pb2, queue_pb2_grpc
from ._sync import Client, Connection, Message, Publisher, Subscriber, Subscription, connect
from ._unary import RescheduleResult, ScheduleResult
from .aio._publisher import PublisherStats
from .aio._subscriber import SubscriptionStats
from . import admin  # noqa: E402,F401
from . import aio  # noqa: E402,F401

__all__ = ["AckError", "Client", "Connection", "FlowControlError", "Message", "Publisher", "PublisherStats",
           "RedqError", "RescheduleResult", "ScheduleResult", "Subscriber", "Subscription", "SubscriptionStats",
           "admin", "aio", "admin_pb2", "admin_pb2_grpc", "connect", "queue_pb2", "queue_pb2_grpc"]
