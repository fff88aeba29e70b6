"""redq.aio.Client against a live redq: schedule, cancel, reschedule and the AdminService's snake_case methods."""

import asyncio
import datetime
import inspect
import re
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
        info = await self.client.get_topic(name=topic)
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

    async def test_raw_admin_stub(self):
        topic = support.topic("admin")
        created = await self.client.admin_stub.CreateTopic(
            name=topic, settings=redq.admin_pb2.TopicSettings(retention_max_length=1000))
        self.assertIsInstance(created, redq.admin_pb2.Topic)
        self.assertEqual(created.name, topic)
        await self.client.admin_stub.DeleteTopic(redq.admin_pb2.DeleteTopicRequest(name=topic))
        with self.assertRaises(redq.RedqError) as caught:
            await self.client.get_topic(name=topic)
        self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)

    async def test_every_admin_rpc_has_a_snake_case_method(self):
        service = redq.admin_pb2.DESCRIPTOR.services_by_name["AdminService"]
        names = [re.sub(r"(?<!^)(?=[A-Z])", "_", method.name).lower() for method in service.methods]
        self.assertEqual(len(names), 18)
        for name in names:
            self.assertTrue(inspect.iscoroutinefunction(getattr(redq.aio.Client, name)), name)
            self.assertTrue(callable(getattr(redq.Client, name)), name)

    async def test_topic_admin_with_plain_types(self):
        topic = support.topic("admin")
        created = await self.client.create_topic(topic, retention_max_age=datetime.timedelta(hours=2),
                                                 retention_max_length=1000, dedupe_window=90)
        self.assertIsInstance(created, redq.admin.Topic)
        self.assertEqual(created.name, topic)
        self.assertEqual(created.settings.retention_max_age, datetime.timedelta(hours=2))
        self.assertEqual(created.settings.dedupe_window, datetime.timedelta(seconds=90))  # seconds given
        self.assertEqual(created.settings.retention_max_length, 1000)
        self.assertIsNone(created.settings.hard_max_length)
        await self.client.schedule(topic, b"later", delay=60)
        updated = await self.client.update_topic(topic, max_payload_bytes=2048)
        self.assertEqual((updated.settings.max_payload_bytes, updated.settings.retention_max_length), (2048, 1000))
        info = await self.client.get_topic(topic)
        self.assertEqual(info.stats.scheduled_count, 1)
        self.assertIsInstance(info.stats.next_due, datetime.datetime)
        self.assertEqual(info.stats.next_due.tzinfo, datetime.timezone.utc)
        self.assertGreater(info.stats.next_due, datetime.datetime.now(datetime.timezone.utc))
        names, token = [], ""
        while True:
            page = await self.client.list_topics(page_size=1000, page_token=token)
            names += [t.name for t in page.items]
            token = page.next_page_token
            if not token:
                break
        self.assertIn(topic, names)
        self.assertIsNone(await self.client.delete_topic(topic))
        with self.assertRaises(redq.RedqError) as caught:
            await self.client.get_topic(topic)
        self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)

    async def test_recurring_schedules(self):
        topic = support.topic("recurring")
        put = await self.client.put_schedule(topic, "tick", b"tick", every=1, attributes={"a": "b"})
        self.assertIsInstance(put, redq.admin.Schedule)
        self.assertEqual((put.every, put.runs), (datetime.timedelta(seconds=1), 0))
        self.assertIsInstance(put.next_run, datetime.datetime)
        nightly = await self.client.put_schedule(topic, "nightly", b"run", cron="0 2 * * *",
                                                 time_zone="Europe/Paris", paused=True)
        self.assertIsNone(nightly.next_run)
        for _ in range(100):
            tick = await self.client.get_schedule(topic, "tick")
            if tick.runs:
                break
            await asyncio.sleep(0.1)
        self.assertGreaterEqual(tick.runs, 1)
        self.assertIsInstance(tick.last_run, datetime.datetime)
        page = await self.client.list_schedules(topic, page_size=1)
        self.assertEqual(([s.name for s in page.items], page.next_page_token), (["nightly"], "nightly"))
        page = await self.client.list_schedules(topic, page_token=page.next_page_token)
        self.assertEqual(([s.name for s in page.items], page.next_page_token), (["tick"], ""))
        self.assertIsNone(await self.client.delete_schedule(topic, "tick"))
        with self.assertRaises(redq.RedqError) as caught:
            await self.client.get_schedule(topic, "tick")
        self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(redq.RedqError) as caught:
            await self.client.put_schedule(topic, "bad", b"x", cron="61 * * * *")
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("schedule.cron", caught.exception.message)
        await self.client.delete_topic(topic)

    async def test_subscription_admin_dead_letters_and_seek(self):
        topic = support.topic("subadmin")
        created = await self.client.create_subscription(
            topic, "s", ack_deadline=datetime.timedelta(seconds=20), retry_policy=(0.05, 0.2),
            max_delivery_attempts=1, dead_lettering=True, start="earliest")
        self.assertIsInstance(created, redq.admin.Subscription)
        self.assertEqual(created.settings.ack_deadline, datetime.timedelta(seconds=20))
        self.assertEqual(created.settings.retry_policy,
                         redq.admin.RetryPolicy(datetime.timedelta(milliseconds=50), datetime.timedelta(seconds=0.2)))
        self.assertEqual(created.settings.max_delivery_attempts, 1)
        updated = await self.client.update_subscription(topic, "s", ack_deadline=45)
        self.assertEqual(updated.settings.ack_deadline, datetime.timedelta(seconds=45))
        self.assertEqual([s.name for s in await self.client.list_subscriptions(topic)], ["s"])

        async with redq.aio.Publisher(support.address()) as publisher:
            first = await publisher.publish(topic, b"to the dead letters")
        nacked = []
        async with redq.aio.Subscriber(support.address()) as subscriber:
            subscriber.subscribe(topic, "s", lambda m: nacked.append(m.nack(0)))
            self.assertTrue(await support.eventually(lambda: nacked))

        async def dead_letters():
            return (await self.client.list_dead_letters(topic, "s")).items
        [dead] = await support.eventually(dead_letters)
        self.assertIsInstance(dead, redq.admin.DeadLetter)
        self.assertEqual((dead.message.id, dead.message.payload, dead.reason),
                         (first, b"to the dead letters", "nacked"))
        self.assertEqual(dead.delivery_attempts, 1)
        self.assertEqual(dead.dead_lettered_at.tzinfo, datetime.timezone.utc)
        self.assertEqual((await self.client.get_subscription(topic, "s")).stats.dead_letters, 1)
        self.assertEqual(await self.client.redrive_dead_letters(topic, "s", [dead.dead_letter_id]), 1)
        self.assertEqual(await self.client.purge_dead_letters(topic, "s"), 0)

        self.assertIsNone(await self.client.seek(topic, "s", time=datetime.datetime.now(datetime.timezone.utc)))
        self.assertIsNone(await self.client.seek(topic, "s", message_id=first))
        with self.assertRaises(ValueError):
            await self.client.seek(topic, "s")
        with self.assertRaises(ValueError):
            await self.client.create_subscription(topic, "t", start="first")
        await self.client.delete_subscription(topic, "s")
        self.assertEqual(await self.client.list_subscriptions(topic), [])

    async def test_error_carries_the_code(self):
        with self.assertRaises(redq.RedqError) as caught:
            await self.client.cancel("bad topic!", "x")
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("topic", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
