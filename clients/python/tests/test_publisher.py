"""redq.aio.Publisher against a live redq: ids, batching, retries with dedupe, per-request errors,
payload types, flow control, deadlines, stats, option checks."""

import asyncio
import datetime
import unittest

import grpc

import support

import redq
import redq.aio


class PublisherTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.addr = support.address()
        self.publisher = redq.aio.Publisher(self.addr)
        self.client = redq.aio.Client(self.addr)

    async def asyncTearDown(self):
        await self.publisher.close()
        await self.client.close()

    async def receive(self, topic, count, subscription="check", timeout=10.0):
        """The first `count` messages of a new subscription, acked."""
        got = []
        async with redq.aio.Subscriber(self.addr) as subscriber:
            subscriber.subscribe(topic, subscription, got.append, start="earliest")
            await support.eventually(lambda: len(got) >= count, timeout)
        return got

    async def test_publish_returns_ids_and_messages_arrive(self):
        topic = support.topic("ids")
        futures = [
            self.publisher.publish(topic, b"one", attributes={"k": "v", "n": "1"}, ordering_key="key-1"),
            self.publisher.publish(topic, memoryview(b"two")),
            self.publisher.publish(topic, bytearray(b"three")),
        ]
        ids = await asyncio.gather(*futures)
        self.assertEqual(len(set(ids)), 3)
        self.assertTrue(all(isinstance(i, str) and i for i in ids))
        got = await self.receive(topic, 3)
        self.assertEqual([m.id for m in got], ids)
        self.assertEqual([m.payload for m in got], [b"one", b"two", b"three"])
        self.assertEqual(got[0].attributes, {"k": "v", "n": "1"})
        self.assertEqual(got[0].ordering_key, "key-1")
        self.assertEqual(got[1].attributes, {})
        self.assertEqual({m.delivery_attempt for m in got}, {1})
        self.assertIsNotNone(got[0].publish_time.tzinfo)

    async def test_concurrent_publishes_share_few_requests(self):
        topic = support.topic("batching")
        ids = await asyncio.gather(*(self.publisher.publish(topic, b"m%d" % i) for i in range(1000)))
        self.assertEqual(len(set(ids)), 1000)
        self.assertEqual(self.publisher.stats.messages_sent, 1000)
        # All 1000 were queued before the writer ran: one request (at most a few).
        self.assertLessEqual(self.publisher.stats.requests_sent, 3)

    async def test_requests_are_bounded_by_messages_and_bytes(self):
        topic = support.topic("bounds")
        by_count = redq.aio.Publisher(self.addr, max_batch_messages=100, max_in_flight=2)
        by_size = redq.aio.Publisher(self.addr, max_batch_bytes=2500, max_in_flight=2)
        try:
            ids = await asyncio.gather(*(by_count.publish(topic, b"x") for _ in range(1000)))
            self.assertEqual(len(set(ids)), 1000)
            self.assertEqual(by_count.stats.requests_sent, 10)  # 100 messages each
            await asyncio.gather(*(by_size.publish(topic, b"y" * 1000) for _ in range(10)))
            self.assertEqual(by_size.stats.requests_sent, 5)  # two 1000-byte messages fit in 2500 bytes, not three
        finally:
            await by_count.close()
            await by_size.close()

    async def test_linger_gathers_and_delivers(self):
        topic = support.topic("linger")
        publisher = redq.aio.Publisher(self.addr, linger=0.02, max_in_flight=2)
        try:
            futures = []
            for i in range(30):  # 30 turns of the loop, 10 publishes each
                futures += [publisher.publish(topic, b"l%d" % i) for _ in range(10)]
                await asyncio.sleep(0)
            ids = await asyncio.wait_for(asyncio.gather(*futures), 10)
        finally:
            await publisher.close()
        self.assertEqual(len(set(ids)), 300)
        self.assertLessEqual(publisher.stats.requests_sent, 30)

    async def test_publish_batch(self):
        topic = support.topic("batch")
        ids = await self.publisher.publish_batch(topic, [b"a", b"b", b"c"] * 500)
        self.assertEqual(len(ids), 1500)
        self.assertEqual(len(set(ids)), 1500)
        self.assertEqual(self.publisher.stats.requests_sent, 2)  # 1000 + 500

    async def test_retry_after_a_lost_response_does_not_duplicate(self):
        topic = support.topic("dedupe")
        self.publisher._lose_next_response = True  # the stream breaks as its first response arrives
        ids = await asyncio.gather(*(self.publisher.publish(topic, b"m%d" % i) for i in range(100)))
        stats = self.publisher.stats
        self.assertGreaterEqual(stats.reconnects, 1)
        self.assertGreaterEqual(stats.retries, 1)
        self.assertEqual(stats.duplicates, 100)  # the resend was recognised by its dedupe ids
        self.assertEqual(len(set(ids)), 100)
        topic_info = await self.client.get_topic(name=topic)
        self.assertEqual(topic_info.stats.published_count, 100)
        got = await self.receive(topic, 100)
        self.assertEqual([m.id for m in got], ids)

    async def test_explicit_dedupe_id(self):
        topic = support.topic("explicit")
        first = await self.publisher.publish(topic, b"a", dedupe_id="order-7")
        second = await self.publisher.publish(topic, b"b", dedupe_id="order-7")
        self.assertEqual(first, second)
        self.assertEqual(self.publisher.stats.duplicates, 1)

    async def test_bad_topic_fails_its_own_promises_only(self):
        good = support.topic("good")
        bad_futures = [self.publisher.publish("bad topic!", b"x") for _ in range(3)]
        good_futures = [self.publisher.publish(good, b"y") for _ in range(3)]
        results = await asyncio.gather(*bad_futures, *good_futures, return_exceptions=True)
        for error in results[:3]:
            self.assertIsInstance(error, redq.RedqError)
            self.assertEqual(error.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("topic", error.message)
        self.assertTrue(all(isinstance(r, str) for r in results[3:]))

    async def test_one_bad_message_fails_alone(self):
        topic = support.topic("toolarge")
        futures = [self.publisher.publish(topic, b"ok-%d" % i) for i in range(5)]
        futures.insert(2, self.publisher.publish(topic, b"x" * (2 * 1024 * 1024)))  # over the server's 1 MiB
        results = await asyncio.gather(*futures, return_exceptions=True)
        self.assertIsInstance(results[2], redq.RedqError)
        self.assertEqual(results[2].code, grpc.StatusCode.INVALID_ARGUMENT)
        others = results[:2] + results[3:]
        self.assertTrue(all(isinstance(r, str) for r in others), others)
        got = await self.receive(topic, 5)
        self.assertEqual([m.payload for m in got], [b"ok-%d" % i for i in range(5)])

    async def test_empty_payload_is_refused_at_once(self):
        with self.assertRaises(ValueError):
            self.publisher.publish(support.topic(), b"")

    async def test_delayed_publish(self):
        topic = support.topic("delayed")
        message_id = await self.publisher.publish(topic, b"later", delay=0.5)
        got = await self.receive(topic, 1)
        self.assertEqual(got[0].id, message_id)
        self.assertGreater(got[0].deliver_at, got[0].publish_time)

    async def test_flush_and_close(self):
        topic = support.topic("flush")
        publisher = redq.aio.Publisher(self.addr)
        futures = [publisher.publish(topic, b"z") for _ in range(10)]
        await publisher.flush()
        self.assertTrue(all(f.done() for f in futures))
        futures = [publisher.publish(topic, b"z") for _ in range(10)]
        await publisher.close()
        self.assertTrue(all(f.done() and not f.exception() for f in futures))
        with self.assertRaises(RuntimeError):
            publisher.publish(topic, b"after close")


    async def test_payload_must_be_bytes_like(self):
        topic = support.topic("types")
        for payload in (5, "text", 1.5, None, [1, 2], object()):
            with self.assertRaises(TypeError, msg=repr(payload)) as caught:
                self.publisher.publish(topic, payload)
            self.assertIn(type(payload).__name__, str(caught.exception))
            with self.assertRaises(TypeError):
                self.publisher.publish_batch(topic, [b"ok", payload])
            with self.assertRaises(TypeError):
                await self.publisher.publish_when_ready(topic, payload)
            with self.assertRaises(TypeError):
                await self.client.schedule(topic, payload, delay=60)
        with self.assertRaisesRegex(TypeError, "encode"):  # a str says how to make bytes of it
            self.publisher.publish(topic, "x")
        self.assertEqual(self.publisher.stats.messages_queued, 0, "nothing was queued")
        ids = await self.publisher.publish_batch(topic, [bytearray(b"ba"), memoryview(b"mv"), b"by"])
        got = await self.receive(topic, 3)
        self.assertEqual([m.id for m in got], ids)
        self.assertEqual([m.payload for m in got], [b"ba", b"mv", b"by"])

    async def test_flow_control_raise(self):
        topic = support.topic("flow-raise")
        proxy = support.Proxy(self.addr)
        publisher = redq.aio.Publisher(proxy.addr, max_outstanding_messages=3, max_outstanding_bytes=10_000,
                                       limit_exceeded="raise")
        try:
            await publisher.publish(topic, b"warm")  # the stream is open
            proxy.hold()  # the server's answers stop coming: what is published stays outstanding
            held = [publisher.publish(topic, b"m%d" % i) for i in range(3)]
            with self.assertRaises(redq.FlowControlError) as caught:
                publisher.publish(topic, b"one too many")
            self.assertEqual(caught.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            with self.assertRaises(redq.FlowControlError):
                await publisher.publish_when_ready(topic, b"raise: no waiting either")
            with self.assertRaises(redq.FlowControlError):
                publisher.publish_batch(topic, [b"a", b"b"])
            self.assertEqual(publisher.stats.messages_queued, 4, "the refused ones were not queued")
            proxy.release()
            ids = await asyncio.wait_for(asyncio.gather(*held), 10)
            self.assertEqual(len(set(ids)), 3)
            await asyncio.wait_for(publisher.publish(topic, b"room again"), 10)
            # Bytes: 10,000 bytes outstanding at most; one message alone may be larger.
            proxy.hold()
            big = publisher.publish(topic, b"x" * 6000)
            with self.assertRaises(redq.FlowControlError):
                publisher.publish(topic, b"y" * 6000)
            proxy.release()
            await asyncio.wait_for(big, 10)
            await asyncio.wait_for(publisher.publish(topic, b"z" * 20_000), 10)  # alone: let through
        finally:
            proxy.release()
            await publisher.close()
            proxy.close()

    async def test_flow_control_block_waits_for_room(self):
        topic = support.topic("flow-block")
        proxy = support.Proxy(self.addr)
        publisher = redq.aio.Publisher(proxy.addr, max_outstanding_messages=2)  # limit_exceeded="block": default
        try:
            await publisher.publish(topic, b"warm")
            proxy.hold()
            held = [publisher.publish(topic, b"m%d" % i) for i in range(2)]
            waiting = asyncio.ensure_future(publisher.publish_when_ready(topic, b"third"))
            with self.assertRaises(redq.FlowControlError):
                publisher.publish(topic, b"the plain call cannot wait")
            await asyncio.sleep(0.3)
            self.assertFalse(waiting.done(), "waits while the limit is reached")
            proxy.release()
            third = await asyncio.wait_for(waiting, 10)  # queued: its future
            ids = await asyncio.wait_for(asyncio.gather(*held, third), 10)
            self.assertEqual(len(set(ids)), 3)
            got = await self.receive(topic, 4)
            self.assertEqual([m.payload for m in got], [b"warm", b"m0", b"m1", b"third"])
        finally:
            proxy.release()
            await publisher.close()
            proxy.close()

    async def test_publish_deadline_against_a_server_that_never_answers(self):
        silent = support.SilentServer()
        try:
            publisher = redq.aio.Publisher(silent.addr, timeout=datetime.timedelta(milliseconds=300))
            futures = [publisher.publish("t", b"x"), publisher.publish("t", b"y")]
            batch = publisher.publish_batch("t", [b"a", b"b"])
            for future in futures + [batch]:
                with self.assertRaises(redq.RedqError) as caught:
                    await asyncio.wait_for(future, 10)
                self.assertEqual(caught.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            self.assertEqual(publisher.stats.messages_failed, 4)
            late = publisher.publish("t", b"unanswered at close")
            await asyncio.wait_for(publisher.close(timeout=0.2), 10)  # does not hang
            with self.assertRaises(redq.RedqError) as caught:
                await late
            self.assertEqual(caught.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            default = redq.aio.Publisher(silent.addr)
            self.assertEqual(default._timeout, 60.0)
            await default.close()
        finally:
            silent.close()

    async def test_stats_count_queued_sent_confirmed_and_failed(self):
        good = support.topic("stats")
        results = await asyncio.gather(*(self.publisher.publish(good, b"g") for _ in range(5)),
                                       self.publisher.publish("bad topic!", b"b"), return_exceptions=True)
        self.assertIsInstance(results[-1], redq.RedqError)
        stats = self.publisher.stats
        self.assertEqual((stats.messages_queued, stats.messages_sent, stats.messages_confirmed,
                          stats.messages_failed), (6, 6, 5, 1))
        self.assertGreaterEqual(stats.requests_sent, 2)  # one request per topic

    async def test_unknown_options_are_type_errors_naming_them(self):
        with self.assertRaisesRegex(TypeError, "batch_size"):
            redq.aio.Publisher(self.addr, batch_size=5)
        with self.assertRaises(TypeError) as caught:
            await self.publisher.publish_when_ready(support.topic(), b"x", ordering="k")
        self.assertIn("'ordering'", str(caught.exception))
        self.assertIn("ordering_key", str(caught.exception))
        with self.assertRaises(TypeError) as caught:
            await self.client.admin_stub.GetTopic(nmae="x")
        self.assertIn("'nmae'", str(caught.exception))
        self.assertIn("name", str(caught.exception))
        with self.assertRaisesRegex(ValueError, "limit_exceeded"):
            redq.aio.Publisher(self.addr, limit_exceeded="drop")


if __name__ == "__main__":
    unittest.main()
