"""redq.aio.Client against a live redq: schedule, cancel, reschedule and the AdminService."""

import datetime
import unittest

import grpc

import support

import redq
import redq.aio


class ClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.client = redq.aio.Client(support.address())

    async def asyncTearDown(self):
        await self.client.close()

    async def test_schedule_reschedule_cancel(self):
        topic = support.topic("sched")
        scheduled = await self.client.schedule(topic, b"later", delay=60, attributes={"a": "b"})
        self.assertTrue(scheduled.message_id)
        self.assertFalse(scheduled.duplicate)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.assertGreater(scheduled.deliver_at, now + datetime.timedelta(seconds=30))
        moved = await self.client.reschedule(topic, scheduled.message_id, delay=datetime.timedelta(minutes=5))
        self.assertTrue(moved.rescheduled)
        self.assertGreater(moved.deliver_at, scheduled.deliver_at)
        info = await self.client.admin.GetTopic(name=topic)
        self.assertEqual(info.stats.scheduled_count, 1)
        self.assertTrue(await self.client.cancel(topic, scheduled.message_id))
        self.assertFalse(await self.client.cancel(topic, scheduled.message_id))  # already cancelled
        moved = await self.client.reschedule(topic, scheduled.message_id, delay=1)
        self.assertFalse(moved.rescheduled)

    async def test_schedule_at_a_time_is_delivered(self):
        topic = support.topic("at")
        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=300)
        scheduled = await self.client.schedule(topic, b"soon", deliver_at=at)
        got = []
        async with redq.aio.Subscriber(support.address()) as subscriber:
            subscriber.subscribe(topic, "s", got.append)
            await support.eventually(lambda: got)
        self.assertEqual(got[0].id, scheduled.message_id)
        self.assertGreaterEqual(got[0].deliver_at, at.replace(microsecond=at.microsecond // 1000 * 1000))

    async def test_schedule_needs_one_time(self):
        with self.assertRaises(ValueError):
            await self.client.schedule("t", b"x")
        with self.assertRaises(ValueError):
            await self.client.schedule("t", b"x", delay=1, deliver_at=datetime.datetime.now())

    async def test_admin(self):
        topic = support.topic("admin")
        created = await self.client.admin.CreateTopic(
            name=topic, settings=redq.admin_pb2.TopicSettings(retention_max_length=1000))
        self.assertEqual(created.name, topic)
        await self.client.admin.CreateSubscription(topic=topic, name="sub")
        listed = await self.client.admin.ListSubscriptions(topic=topic)
        self.assertEqual([s.name for s in listed.subscriptions], ["sub"])
        await self.client.admin.DeleteTopic(redq.admin_pb2.DeleteTopicRequest(name=topic))
        with self.assertRaises(redq.RedqError) as caught:
            await self.client.admin.GetTopic(name=topic)
        self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)

    async def test_error_carries_the_code(self):
        with self.assertRaises(redq.RedqError) as caught:
            await self.client.cancel("bad topic!", "x")
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("topic", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
