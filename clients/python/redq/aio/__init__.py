"""redq's asyncio API (grpc.aio): Publisher, Subscriber, Client.

    async with redq.aio.Publisher() as publisher:
        message_id = await publisher.publish("orders", b"hello")
"""

from .._common import RedqError
from .._unary import RescheduleResult, ScheduleResult
from ._client import Client
from ._publisher import Publisher, PublisherStats
from ._subscriber import Message, Subscriber, Subscription, SubscriptionStats

__all__ = ["Client", "Message", "Publisher", "PublisherStats", "RedqError", "RescheduleResult", "ScheduleResult",
           "Subscriber", "Subscription", "SubscriptionStats"]
