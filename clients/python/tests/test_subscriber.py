"""redq.aio.Subscriber against a live redq: acks, nacks, failing handlers, leases, ack linger, graceful close,
confirmed acks, flush(), ready()."""

import asyncio
import unittest

import grpc

import support

import redq
import redq.aio

# Retry backoff of the subscriptions these tests create: redelivery after a nack without delay is quick.
FAST_RETRY = (0.05, 0.2)


class SubscriberTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.addr = support.address()
        self.client = redq.aio.Client(self.addr)
        self.subscriber = redq.aio.Subscriber(self.addr)

    async def asyncTearDown(self):
        await self.subscriber.close()
        await self.client.close()

    async def publish(self, topic, payloads):
        async with redq.aio.Publisher(self.addr) as publisher:
            return await publisher.publish_batch(topic, payloads)

    async def subscription_stats(self, topic, name):
        return (await self.client.get_subscription(topic=topic, name=name)).stats

    async def test_returning_acks(self):
        topic = support.topic("ack")
        ids = await self.publish(topic, [b"a", b"b", b"c"])
        seen = []

        async def handler(message):
            seen.append((message.id, message.payload, message.delivery_attempt))
        sub = self.subscriber.subscribe(topic, "s", handler, max_outstanding=10)
        await support.eventually(lambda: len(seen) >= 3)
        await sub.close()
        self.assertEqual(seen, [(i, p, 1) for i, p in zip(ids, [b"a", b"b", b"c"])])
        self.assertEqual(sub.stats.acks_sent, 3)
        stats = await self.subscription_stats(topic, "s")
        self.assertEqual(stats.pending, 0)
        self.assertEqual(stats.acked_count, 3)

    async def test_message_ordering_runs_one_message_of_a_key_at_a_time_in_order(self):
        topic = support.topic("ordered")
        async with redq.aio.Publisher(self.addr) as publisher:
            ids = []
            for i in range(3):
                ids.append(await publisher.publish(topic, b"a-%d" % i, ordering_key="a"))
                await publisher.publish(topic, b"b-%d" % i, ordering_key="b")
        running, order, overlaps = set(), [], []

        async def handler(message):
            if message.ordering_key in running:
                overlaps.append(message.id)
            running.add(message.ordering_key)
            if message.ordering_key == "a":
                order.append(message.id)
            await asyncio.sleep(0.05)
            running.discard(message.ordering_key)

        self.subscriber.subscribe(topic, "ordered", handler, concurrency=10, message_ordering=True)
        await support.eventually(lambda: len(order) == 3)
        self.assertEqual(overlaps, [], "no two handlers of one key at once")
        self.assertEqual(order, ids)
        info = await self.client.get_subscription(topic=topic, name="ordered")
        self.assertTrue(info.settings.message_ordering)

    async def test_nack_redelivers_with_attempt_2(self):
        topic = support.topic("nack")
        [message_id] = await self.publish(topic, [b"again"])
        attempts = []

        def handler(message):  # a plain function works too
            attempts.append(message.delivery_attempt)
            if message.delivery_attempt == 1:
                message.nack(0)  # explicit, zero delay: back at once
        sub = self.subscriber.subscribe(topic, "s", handler)
        await support.eventually(lambda: len(attempts) >= 2)
        await sub.close()
        self.assertEqual(attempts, [1, 2])
        self.assertEqual(sub.stats.nacks_sent, 1)
        self.assertEqual((await self.subscription_stats(topic, "s")).acked_count, 1)

    async def test_raising_nacks(self):
        topic = support.topic("raise")
        await self.publish(topic, [b"boom"])
        attempts = []

        async def handler(message):
            attempts.append(message.delivery_attempt)
            if message.delivery_attempt == 1:
                raise RuntimeError("handler failure (expected by the test)")
        with self.assertLogs("redq", "ERROR"):
            sub = self.subscriber.subscribe(topic, "s", handler, retry_policy=FAST_RETRY)
            await support.eventually(lambda: len(attempts) >= 2)
        await sub.close()
        self.assertEqual(attempts, [1, 2])
        self.assertEqual(sub.stats.handler_errors, 1)
        self.assertEqual((await self.subscription_stats(topic, "s")).pending, 0)

    async def test_lease_is_extended_while_the_handler_runs(self):
        topic = support.topic("lease")
        await self.publish(topic, [b"slow"])
        deliveries = []
        done = asyncio.Event()

        async def handler(message):
            deliveries.append(message.delivery_attempt)
            await asyncio.sleep(3.5)  # well past the 1 s ack deadline
            done.set()
        sub = self.subscriber.subscribe(topic, "s", handler, ack_deadline=1.0, retry_policy=FAST_RETRY,
                                        concurrency=4)
        await asyncio.wait_for(done.wait(), 10)
        await sub.close()
        self.assertEqual(deliveries, [1])  # never redelivered meanwhile
        self.assertGreaterEqual(sub.stats.extensions_sent, 3)
        stats = await self.subscription_stats(topic, "s")
        self.assertEqual((stats.pending, stats.acked_count), (0, 1))

    async def test_graceful_close_waits_for_handlers_and_acks(self):
        topic = support.topic("close")
        await self.publish(topic, [b"m%d" % i for i in range(20)])
        started, finished = [], []

        async def handler(message):
            started.append(message.payload)
            await asyncio.sleep(0.3)
            finished.append(message.payload)
        sub = self.subscriber.subscribe(topic, "s", handler, max_outstanding=5, concurrency=3)
        await support.eventually(lambda: len(started) >= 3)
        await sub.close()
        self.assertTrue(sub.closed)
        self.assertEqual(sorted(started), sorted(finished))  # nothing cut short
        count = len(finished)
        self.assertLess(count, 20)
        stats = await self.subscription_stats(topic, "s")
        self.assertEqual(stats.acked_count, count)
        # What was not handled was given back: another subscriber gets the rest at once.
        rest = []
        other = self.subscriber.subscribe(topic, "s", lambda m: rest.append(m.payload), max_outstanding=20)
        await support.eventually(lambda: len(rest) >= 20 - count)
        await other.close()
        self.assertEqual(sorted(rest + finished), sorted(b"m%d" % i for i in range(20)))

    async def test_acks_linger_under_half_the_window_go_at_once_past_it_and_on_close(self):
        topic = support.topic("linger")
        linger = 3.0
        handled = []  # loop times the handler ran
        loop = asyncio.get_running_loop()
        sub = self.subscriber.subscribe(topic, "linger", lambda m: handled.append(loop.time()), max_outstanding=10,
                                        ack_linger=linger)

        async def acked(count):
            return (await self.subscription_stats(topic, "linger")).acked_count == count

        # One message: 1 of 10 held, its ack waits for more.
        await self.publish(topic, [b"first"])
        self.assertTrue(await support.eventually(lambda: len(handled) == 1))
        await asyncio.sleep(0.5)
        self.assertTrue(await acked(0), "the ack lingers")
        self.assertTrue(await support.eventually(lambda: acked(1), interval=0.05), "the lingering ack is sent")
        self.assertGreaterEqual(loop.time() - handled[0], linger - 0.1, "sent after the linger, not before")

        # Five at once: half the window held, their acks go at once.
        published = loop.time()
        await self.publish(topic, [b"m%d" % i for i in range(5)])
        self.assertTrue(await support.eventually(lambda: acked(6), interval=0.05), "the acks of a half-full window")
        self.assertLess(loop.time() - published, linger - 0.5, "without lingering")

        # close() sends a lingering ack at once.
        await self.publish(topic, [b"last"])
        self.assertTrue(await support.eventually(lambda: len(handled) == 7))
        closing = loop.time()
        await sub.close()
        self.assertLess(loop.time() - closing, linger - 0.5, "close did not wait for the linger")
        self.assertTrue(await acked(7))
        self.assertEqual(sub.stats.acks_sent, 7)
        self.assertEqual(sub.stats.acks_confirmed, 0, "a handler's return asks for no confirmation")

    async def test_a_response_of_more_than_half_the_window_is_handled_in_halves(self):
        topic = support.topic("halves")
        await self.client.create_topic(name=topic)
        await self.client.create_subscription(topic=topic, name="halves")
        await self.publish(topic, [b"m%d" % i for i in range(10)])
        seen = []  # the ack ids sent when each handler ran
        sub = self.subscriber.subscribe(topic, "halves", lambda m: seen.append(sub.stats.acks_sent), max_outstanding=10)
        self.assertTrue(await support.eventually(lambda: len(seen) == 10))
        self.assertEqual(sub.stats.responses, 1, "the backlog came in one response")
        self.assertEqual(seen, [0] * 5 + [5] * 5, "the first half's acks went before the second half ran")

        async def all_acked():
            return (await self.subscription_stats(topic, "halves")).acked_count == 10
        self.assertTrue(await support.eventually(all_acked, interval=0.05))
        await sub.close()

    async def test_negative_ack_linger_is_refused(self):
        with self.assertRaisesRegex(ValueError, "ack_linger"):
            self.subscriber.subscribe(support.topic("linger"), "s", lambda m: None, ack_linger=-0.001)

    async def test_bad_request_fails_the_subscription(self):
        with self.assertLogs("redq", "ERROR"):  # nobody awaits ready() or wait(): the log reports it
            sub = self.subscriber.subscribe("bad topic!", "s", lambda m: None)
            await support.eventually(lambda: sub.closed)
        with self.assertRaises(redq.RedqError) as caught:
            await asyncio.wait_for(sub.wait(), 10)
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    async def test_ready_when_the_stream_is_open_and_a_refusal_is_reported_once(self):
        topic = support.topic("ready")
        sub = self.subscriber.subscribe(topic, "fresh", lambda m: None)
        await asyncio.wait_for(sub.ready(), 10)
        # Open means the server created the subscription: no waiting for it.
        info = await self.client.get_subscription(topic, "fresh")
        self.assertEqual(info.name, "fresh")
        await sub.ready()  # stays settled

        with self.assertNoLogs("redq", "ERROR"):  # the caller of ready() gets it, the log does not
            refused = self.subscriber.subscribe("bad topic!", "s", lambda m: None)
            with self.assertRaises(redq.RedqError) as caught:
                await asyncio.wait_for(refused.ready(), 10)
            self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            with self.assertRaises(redq.RedqError) as again:
                await asyncio.wait_for(refused.wait(), 10)
        self.assertIs(again.exception, caught.exception)  # one failure, the same error
        self.assertEqual(refused.stats.reconnects, 0)

    async def test_await_ack_and_nack_settle_when_the_server_applied_them(self):
        topic = support.topic("confirmed")
        await self.publish(topic, [b"ack", b"nack"])
        outcomes, acked_counts = [], []

        async def handler(message):
            if message.payload == b"ack":
                outcomes.append(await message.ack())
                # Confirmed: the server's count has it already.
                acked_counts.append((await self.subscription_stats(topic, "s")).acked_count)
            elif message.delivery_attempt == 1:
                outcomes.append(await message.nack(0))
            else:
                await message.ack()
                outcomes.append("redelivered")
        sub = self.subscriber.subscribe(topic, "s", handler, retry_policy=FAST_RETRY)
        self.assertTrue(await support.eventually(lambda: len(outcomes) == 3))
        await sub.close()
        self.assertEqual(sorted(map(str, outcomes)), ["None", "None", "redelivered"])
        self.assertGreaterEqual(acked_counts[0], 1)  # 2 if the redelivery's ack came first
        self.assertEqual((sub.stats.acks_confirmed, sub.stats.nacks_confirmed), (2, 1))

    async def test_a_lost_lease_fails_the_ack(self):
        topic = support.topic("lost")
        await self.publish(topic, [b"once"])
        results, ack_ids = [], []

        async def handler(message):
            if message.delivery_attempt > 1:
                return
            ack_ids.append(message.ack_id)
            # Someone else settles this delivery first (here: a unary Ack with its ack id).
            await self.client.queue_stub.Ack(topic=topic, subscription="s", ack_ids=[message.ack_id])
            try:
                await message.ack()
            except redq.AckError as err:
                results.append(err)
            second = message.ack()  # a second call: the first one's outcome
            results.append(second)
        sub = self.subscriber.subscribe(topic, "s", handler)
        self.assertTrue(await support.eventually(lambda: len(results) == 2))
        await sub.close()
        error = results[0]
        self.assertEqual(error.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(error.ack_id, ack_ids[0])
        self.assertIn("lost", error.message)
        with self.assertRaises(redq.AckError):
            await results[1]
        self.assertEqual(sub.stats.lost, 1)

    async def test_flush_waits_until_acks_already_written_are_applied(self):
        topic = support.topic("flush")
        await self.client.create_topic(topic)
        await self.client.create_subscription(topic, "s")
        await self.publish(topic, [b"m%d" % i for i in range(10)])
        handled = []
        # A window of 10: from the fifth message on the acks go at once (half the window), the others after
        # the linger; by the time the tenth is handled, most are written already.
        sub = self.subscriber.subscribe(topic, "s", lambda m: handled.append(m.id), max_outstanding=10,
                                        ack_linger=0.05)
        self.assertTrue(await support.eventually(lambda: len(handled) == 10))
        await asyncio.wait_for(sub.flush(), 10)
        stats = await self.subscription_stats(topic, "s")
        self.assertEqual((stats.acked_count, stats.pending), (10, 0), "flush() returned before the acks were in")
        await asyncio.wait_for(sub.flush(), 10)  # nothing new: a barrier alone
        await sub.close()
        await sub.flush()  # closed gracefully: nothing to wait for

    async def test_flush_fails_when_the_stream_ends_before_confirming(self):
        topic = support.topic("flush-cut")
        proxy = support.Proxy(self.addr)
        subscriber = redq.aio.Subscriber(proxy.addr)
        try:
            await self.publish(topic, [b"a"])
            handled = []
            sub = subscriber.subscribe(topic, "s", handled.append, ack_linger=0)
            self.assertTrue(await support.eventually(lambda: handled))
            proxy.hold()
            flushing = asyncio.ensure_future(sub.flush())
            await asyncio.sleep(0.2)
            self.assertFalse(flushing.done(), "no confirmation can come while the network is held")
            proxy.cut()
            with self.assertRaises(redq.RedqError) as caught:
                await asyncio.wait_for(flushing, 10)
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAVAILABLE)
        finally:
            proxy.release()
            await subscriber.close()
            proxy.close()

    async def test_many_messages_with_small_outstanding(self):
        topic = support.topic("many")
        await self.publish(topic, [b"%d" % i for i in range(3000)])
        got = set()
        sub = self.subscriber.subscribe(topic, "s", lambda m: got.add(m.payload), max_outstanding=50)
        await support.eventually(lambda: len(got) >= 3000, timeout=20)
        await sub.close()
        self.assertEqual(len(got), 3000)
        self.assertLess(sub.stats.requests_sent, 3000)  # acks went batched, not one request each
        stats = await self.subscription_stats(topic, "s")
        self.assertEqual((stats.pending, stats.acked_count), (0, 3000))


if __name__ == "__main__":
    unittest.main()
