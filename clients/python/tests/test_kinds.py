"""Topic kinds against a live redq: EPHEMERAL and LIST topics created and reported, Message.topic,
subscribing with a pattern (and its argument errors), EPHEMERAL deliveries (no ack id: ack() and nack()
send nothing), the subscription's dropped count, and publishing to and consuming a LIST topic.

LIST topics consume lists under `legacy:jobs:`: the least-privilege user of the live server CI runs
is granted those keys beside redq's own (.ci/run, docs/topic-kinds.md)."""

import asyncio
import threading
import unittest
import uuid

import grpc

import support

import redq
import redq.aio


def list_key():
    """A fresh Redis list for a LIST topic."""
    return f"legacy:jobs:py-{uuid.uuid4().hex[:10]}"


def ephemeral_family():
    """A fresh first segment for a family of EPHEMERAL topics (`<family>.a.temp`…), so that a pattern
    of this run matches no other run's topics."""
    return f"py-kinds-{uuid.uuid4().hex[:10]}"


class KindsTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.addr = support.address()
        self.client = redq.aio.Client(self.addr)
        self.subscriber = redq.aio.Subscriber(self.addr)

    async def asyncTearDown(self):
        await self.subscriber.close()
        await self.client.close()

    async def listed(self, client, name):
        token = ""
        while True:
            page = await client.list_topics(page_size=1000, page_token=token)
            for topic in page.items:
                if topic.name == name:
                    return topic
            token = page.next_page_token
            if not token:
                return None

    async def test_ephemeral_topic_reports_its_kind(self):
        name = f"{ephemeral_family()}.created"
        created = await self.client.create_topic(name, kind="ephemeral")
        self.assertEqual((created.settings.kind, created.settings.list_key), ("ephemeral", None))
        self.assertEqual((await self.client.get_topic(name)).settings.kind, "ephemeral")
        self.assertEqual((await self.listed(self.client, name)).settings.kind, "ephemeral")
        # A topic made by publishing is a STREAM topic, and says so.
        stream = support.topic("stream")
        async with redq.aio.Publisher(self.addr) as publisher:
            await publisher.publish(stream, b"x")
        self.assertEqual((await self.client.get_topic(stream)).settings.kind, "stream")
        # The kind is fixed at creation: update_topic() takes none.
        with self.assertRaises(TypeError):
            await self.client.update_topic(name, kind="stream")  # type: ignore[call-arg]
        await self.client.delete_topic(name)

    async def test_list_topic_reports_its_kind_and_list_key(self):
        name, key = support.topic("list"), list_key()
        created = await self.client.create_topic(name, kind="list", list_key=key)
        self.assertEqual((created.settings.kind, created.settings.list_key), ("list", key))
        got = await self.client.get_topic(name)
        self.assertEqual((got.settings.kind, got.settings.list_key), ("list", key))
        listed = await self.listed(self.client, name)
        self.assertEqual((listed.settings.kind, listed.settings.list_key), ("list", key))
        # The server checks what needs Redis: a second LIST topic on the same key.
        with self.assertRaises(redq.RedqError) as caught:
            await self.client.create_topic(support.topic("list"), kind="list", list_key=key)
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        await self.client.delete_topic(name)

    async def test_list_topic_published_to_and_consumed(self):
        name = support.topic("list")
        await self.client.create_topic(name, kind="list", list_key=list_key())
        # A Publisher with its defaults: its automatic request dedupe id is refused by the LIST
        # topic (a list element is bytes only), and it sends the request again without one.
        async with redq.aio.Publisher(self.addr) as publisher:
            ids = await publisher.publish_batch(name, [b"job-1", b"job-2"])
            ids.append(await publisher.publish(name, b"job-3"))
        self.assertEqual((publisher.stats.messages_failed, publisher.stats.messages_confirmed), (0, 3))
        got, outcomes = [], []

        def handler(message):
            got.append(message)
            outcomes.append(message.ack())
        sub = self.subscriber.subscribe(name, "workers", handler)
        await support.eventually(lambda: len(got) == 3)
        # Oldest first. A list element carries no id: a delivery's is the one redq gave it when it took it.
        self.assertEqual([(m.topic, m.payload) for m in got], [(name, b"job-1"), (name, b"job-2"), (name, b"job-3")])
        self.assertEqual(len(set(ids)), 3)
        self.assertTrue(all(m.id and m.ack_id for m in got))
        self.assertEqual([await outcome for outcome in outcomes], [None, None, None])  # applied
        await sub.close()
        self.assertEqual(sub.dropped, 0)

    async def test_kind_is_checked_before_any_call(self):
        with self.assertRaises(ValueError) as caught:
            await self.client.create_topic(support.topic("kind"), kind="queue")  # type: ignore[arg-type]
        self.assertIn("kind", str(caught.exception))
        # list_key on another kind: the server names the field.
        with self.assertRaises(redq.RedqError) as refused:
            await self.client.create_topic(support.topic("kind"), kind="ephemeral", list_key="legacy:jobs")
        self.assertEqual(refused.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("list_key", refused.exception.message)

    async def test_stream_messages_carry_their_topic(self):
        topic = support.topic("topic")
        async with redq.aio.Publisher(self.addr) as publisher:
            ids = await publisher.publish_batch(topic, [b"a", b"b"])
        got = []
        sub = self.subscriber.subscribe(topic, "s", got.append)
        await support.eventually(lambda: len(got) == 2)
        await sub.close()
        self.assertEqual([(m.id, m.topic) for m in got], [(ids[0], topic), (ids[1], topic)])
        self.assertTrue(all(m.ack_id for m in got))
        self.assertEqual(sub.stats.acks_sent, 2)
        self.assertEqual(sub.dropped, 0)

    async def test_topic_or_pattern_not_both_nor_neither(self):
        def handler(message):
            pass
        for topic, pattern in (("t", "sensors.>"), (None, None), ("", None), (None, "")):
            with self.subTest(topic=topic, pattern=pattern):
                with self.assertRaises(ValueError) as caught:
                    self.subscriber.subscribe(topic, "s", handler, pattern=pattern)
                self.assertIn("pattern", str(caught.exception))
        with redq.Subscriber(self.addr) as subscriber:
            with self.assertRaises(ValueError):
                subscriber.subscribe("t", "s", handler, pattern="sensors.>")
            with self.assertRaises(ValueError):
                subscriber.subscribe(None, "s", handler)
        # A pattern the server cannot parse: refused, naming the field.
        sub = self.subscriber.subscribe(None, "s", handler, pattern="sensors.>.temp")
        with self.assertRaises(redq.RedqError) as refused:
            await sub.ready()
        self.assertEqual(refused.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("pattern", refused.exception.message)

    async def test_pattern_stream_gets_the_matching_ephemeral_topics(self):
        family = ephemeral_family()
        kitchen, hall, humidity = f"{family}.kitchen.temp", f"{family}.hall.temp", f"{family}.kitchen.humidity"
        for name in (kitchen, hall, humidity):
            await self.client.create_topic(name, kind="ephemeral")
        got, outcomes = [], []

        def handler(message):
            got.append(message)
            # Nothing to settle: resolved futures, nothing sent.
            outcomes.append(message.ack() if len(got) % 2 else message.nack(0))
        sub = self.subscriber.subscribe(None, "dashboard", handler, pattern=f"{family}.*.temp", max_outstanding=10)
        await sub.ready()  # the server's Redis subscription is in place: every later message comes
        async with redq.aio.Publisher(self.addr) as publisher:
            skipped = await publisher.publish(humidity, b"55%")
            first = await publisher.publish(kitchen, b"21.5")
            second = await publisher.publish(hall, b"19.0")
            # Published last to a matching topic: once it is in, the one before it would be too.
            last = await publisher.publish(kitchen, b"21.6")
        await support.eventually(lambda: len(got) == 3)
        self.assertEqual([(m.id, m.topic, m.payload) for m in got],
                         [(first, kitchen, b"21.5"), (second, hall, b"19.0"), (last, kitchen, b"21.6")])
        self.assertNotIn(skipped, [m.id for m in got])
        self.assertEqual([m.ack_id for m in got], ["", "", ""])
        self.assertEqual([m.delivery_attempt for m in got], [1, 1, 1])
        self.assertEqual([await outcome for outcome in outcomes], [None, None, None])
        self.assertEqual(await got[0].ack(), None)  # a second ack() is no error either
        await sub.flush()
        await sub.close()
        self.assertEqual(sub.dropped, 0)
        self.assertEqual((sub.stats.acks_sent, sub.stats.nacks_sent, sub.stats.extensions_sent), (0, 0, 0))

    async def test_ephemeral_topic_with_the_sync_api(self):
        topic = f"{ephemeral_family()}.sync"
        await self.client.create_topic(topic, kind="ephemeral")
        received = threading.Event()
        got = []

        def handler(message):
            got.append((message.topic, message.payload, message.ack_id, message.ack().result(5)))
            received.set()
        with redq.Subscriber(self.addr) as subscriber:
            sub = subscriber.subscribe(topic, "live", handler)
            sub.ready(timeout=10)
            with redq.Publisher(self.addr) as publisher:
                publisher.publish(topic, b"now").result(10)
            self.assertTrue(await asyncio.to_thread(received.wait, 10))
            sub.close()
            self.assertEqual(sub.dropped, 0)
            self.assertEqual(sub.stats.acks_sent, 0)
        self.assertEqual(got, [(topic, b"now", "", None)])

    async def test_a_stream_that_falls_behind_counts_what_it_lost(self):
        topic = f"{ephemeral_family()}.firehose"
        await self.client.create_topic(topic, kind="ephemeral")
        published = 200
        payload = b"x" * (256 * 1024)  # 50 MiB in all: more than gRPC's windows hold for a reader that stops
        all_published = threading.Event()
        got = []

        def handler(message):
            if not got:
                # The first handler blocks this loop, and so the stream's reader, until everything is
                # published (from another thread): the server's buffer for the stream fills and drops.
                all_published.wait(60)
            got.append(message.id)

        def publish_all():
            with redq.Publisher(self.addr) as publisher:
                for _ in range(published):
                    publisher.publish(topic, payload)
                publisher.flush(60)
            all_published.set()
        sub = self.subscriber.subscribe(topic, "slow", handler, max_outstanding=1, max_outstanding_bytes=1024 * 1024)
        await sub.ready()
        publishing = threading.Thread(target=publish_all)
        publishing.start()
        # `dropped` is exact: received + dropped = published while the stream was open.
        self.assertTrue(await support.eventually(lambda: len(got) + sub.dropped == published, timeout=60),
                        f"received {len(got)} and dropped {sub.dropped} of {published}")
        publishing.join(10)
        self.assertGreater(sub.dropped, 0)
        await sub.close()


if __name__ == "__main__":
    unittest.main()
