"""redq's asyncio API (grpc.aio): Publisher, Subscriber, Client, and connect() for one channel they share.

    async with redq.aio.Publisher() as publisher:
        message_id = await publisher.publish("orders", b"hello")
"""

from .._common import AckError, FlowControlError, RedqError
from .._security import Connection, connect
from .._unary import RescheduleResult, ScheduleResult
from ._client import Client
from ._publisher import Publisher, PublisherStats
from ._subscriber import Message, Subscriber, Subscription, SubscriptionStats

__all__ = ["AckError", "Client", "Connection", "FlowControlError", "Message", "Publisher", "PublisherStats",
           "RedqError", "RescheduleResult", "ScheduleResult", "Subscriber", "Subscription", "SubscriptionStats",
           "connect"]
