"""The synchronous API (redq.Publisher, redq.Subscriber, redq.Client, redq.connect) against a live redq."""

import concurrent.futures
import datetime
import threading
import time
import unittest

import grpc

import support

import redq


class SyncTest(unittest.TestCase):
    def setUp(self):
        self.addr = support.address()

    def test_publish_from_threads_and_receive_in_a_pool(self):
        topic = support.topic("sync")
        with redq.Publisher(self.addr) as publisher:
            futures = []

            def produce(n):
                futures.extend(publisher.publish(topic, b"%d-%d" % (n, i), attributes={"n": str(n)})
                               for i in range(250))
            threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            self.assertTrue(all(isinstance(f, concurrent.futures.Future) for f in futures))
            ids = [f.result(10) for f in futures]
            self.assertEqual(len(set(ids)), 1000)
            self.assertLess(publisher.stats.requests_sent, 1000)  # handed over and sent in batches

        got, lock, handler_threads = set(), threading.Lock(), set()

        def handler(message):
            with lock:
                got.add(message.payload)
                handler_threads.add(threading.current_thread().name)
        with redq.Subscriber(self.addr) as subscriber:
            sub = subscriber.subscribe(topic, "s", handler, concurrency=4)
            support.eventually_sync(lambda: len(got) >= 1000, timeout=15)
            sub.close()
        self.assertEqual(len(got), 1000)
        self.assertTrue(all(name.startswith("redq-handler-") for name in handler_threads))
        with redq.Client(self.addr) as client:
            stats = client.get_subscription(topic, "s").stats
        self.assertEqual((stats.pending, stats.acked_count), (0, 1000))

    def test_nack_and_raise_redeliver(self):
        topic = support.topic("syncnack")
        with redq.Publisher(self.addr) as publisher:
            publisher.publish_batch(topic, [b"explicit", b"raises"]).result(10)
        attempts = {b"explicit": [], b"raises": []}

        def handler(message):
            attempts[message.payload].append(message.delivery_attempt)
            if message.delivery_attempt == 1:
                if message.payload == b"explicit":
                    message.nack(0)
                else:
                    raise ValueError("handler failure (expected by the test)")
        with self.assertLogs("redq", "ERROR"), redq.Subscriber(self.addr) as subscriber:
            sub = subscriber.subscribe(topic, "s", handler, retry_policy=(0.05, 0.2))
            support.eventually_sync(lambda: all(len(a) >= 2 for a in attempts.values()))
            sub.close()
        self.assertEqual(attempts, {b"explicit": [1, 2], b"raises": [1, 2]})

    def test_graceful_close_waits_for_a_running_handler(self):
        topic = support.topic("syncclose")
        with redq.Publisher(self.addr) as publisher:
            publisher.publish(topic, b"slow").result(10)
        started, finished = threading.Event(), threading.Event()

        def handler(message):
            started.set()
            time.sleep(0.5)
            finished.set()
        subscriber = redq.Subscriber(self.addr)
        sub = subscriber.subscribe(topic, "s", handler)
        self.assertTrue(started.wait(10))
        sub.close()
        self.assertTrue(finished.is_set())
        subscriber.close()
        with redq.Client(self.addr) as client:
            self.assertEqual(client.get_subscription(topic=topic, name="s").stats.acked_count, 1)

    def test_acks_settled_in_handler_threads_linger_and_close_sends_them(self):
        topic = support.topic("synclinger")
        linger = 2.0
        handled = []  # monotonic times the handler ran

        def acked(count):
            return client.get_subscription(topic=topic, name="s").stats.acked_count == count
        with redq.Publisher(self.addr) as publisher, redq.Client(self.addr) as client, \
                redq.Subscriber(self.addr) as subscriber:
            sub = subscriber.subscribe(topic, "s", lambda m: handled.append(time.monotonic()), max_outstanding=10,
                                       ack_linger=linger)
            publisher.publish(topic, b"first").result(10)
            self.assertTrue(support.eventually_sync(lambda: len(handled) == 1))
            time.sleep(0.3)
            self.assertTrue(acked(0), "the ack lingers")
            self.assertTrue(support.eventually_sync(lambda: acked(1), interval=0.05), "the lingering ack is sent")
            self.assertGreaterEqual(time.monotonic() - handled[0], linger - 0.1, "sent after the linger")

            publisher.publish(topic, b"last").result(10)
            self.assertTrue(support.eventually_sync(lambda: len(handled) == 2))
            closing = time.monotonic()
            sub.close()
            self.assertLess(time.monotonic() - closing, linger - 0.5, "close did not wait for the linger")
            self.assertTrue(acked(2))
            with self.assertRaisesRegex(ValueError, "ack_linger"):
                subscriber.subscribe(topic, "s", lambda m: None, ack_linger=-1)

    def test_client_schedule_cancel_reschedule_and_errors(self):
        topic = support.topic("syncclient")
        with redq.Client(self.addr) as client:
            scheduled = client.schedule(topic, b"in a minute", delay=60)
            self.assertTrue(client.reschedule(topic, scheduled.message_id, delay=120).rescheduled)
            self.assertTrue(client.cancel(topic, scheduled.message_id))
            with self.assertRaises(redq.RedqError) as caught:
                client.get_subscription(topic=topic, name="missing")
            self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_publish_error_on_the_future(self):
        with redq.Publisher(self.addr) as publisher:
            future = publisher.publish("bad topic!", b"x")
            with self.assertRaises(redq.RedqError) as caught:
                future.result(10)
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)


    def test_payload_must_be_bytes_like(self):
        topic = support.topic("synctypes")
        with redq.Publisher(self.addr) as publisher, redq.Client(self.addr) as client:
            for payload in (5, "text", None):
                with self.assertRaises(TypeError):
                    publisher.publish(topic, payload)
                with self.assertRaises(TypeError):
                    publisher.publish_batch(topic, [payload])
                with self.assertRaises(TypeError):
                    client.schedule(topic, payload, delay=60)
            self.assertEqual(publisher.stats.messages_queued, 0)
            self.assertTrue(publisher.publish(topic, bytearray(b"ok")).result(10))

    def test_flow_control_blocks_the_publishing_thread_or_raises(self):
        topic = support.topic("syncflow")
        proxy = support.Proxy(self.addr)
        try:
            with redq.Publisher(proxy.addr, max_outstanding_messages=2) as publisher:
                publisher.publish(topic, b"warm").result(10)
                proxy.hold()
                held = [publisher.publish(topic, b"m%d" % i) for i in range(2)]
                third = []
                thread = threading.Thread(target=lambda: third.append(publisher.publish(topic, b"third")))
                thread.start()
                thread.join(0.3)
                self.assertTrue(thread.is_alive(), "publish() waits while the limit is reached")
                proxy.release()
                thread.join(10)
                self.assertFalse(thread.is_alive())
                self.assertEqual(len({f.result(10) for f in held + third}), 3)
            with redq.Publisher(proxy.addr, max_outstanding_messages=1, limit_exceeded="raise") as publisher:
                publisher.publish(topic, b"warm").result(10)
                proxy.hold()
                first = publisher.publish(topic, b"one")
                with self.assertRaises(redq.FlowControlError):
                    publisher.publish(topic, b"two")
                with self.assertRaises(redq.FlowControlError):
                    publisher.publish_batch(topic, [b"three"])
                proxy.release()
                self.assertTrue(first.result(10))
        finally:
            proxy.close()

    def test_publish_deadline_and_close_timeout_against_a_silent_server(self):
        silent = support.SilentServer()
        try:
            publisher = redq.Publisher(silent.addr, timeout=0.3)
            future = publisher.publish("t", b"x")
            with self.assertRaises(redq.RedqError) as caught:
                future.result(10)
            self.assertEqual(caught.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            default = redq.Publisher(silent.addr)
            late = default.publish("t", b"unanswered")  # default timeout: 60 s
            closing = redq.Publisher(silent.addr)
            pending = closing.publish("t", b"y")
            closing.close(timeout=0.2)  # returns: what is unanswered fails
            with self.assertRaises(redq.RedqError) as caught:
                pending.result(1)
            self.assertEqual(caught.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            self.assertFalse(late.done())
            publisher.close(timeout=1)
            default.close(timeout=0.1)
            self.assertEqual(late.exception(1).code, grpc.StatusCode.DEADLINE_EXCEEDED)
        finally:
            silent.close()

    def test_ack_future_flush_and_ready(self):
        topic = support.topic("syncconfirm")
        with redq.Publisher(self.addr) as publisher:
            publisher.publish_batch(topic, [b"a", b"b", b"c"]).result(10)
        outcomes = []

        def handler(message):
            outcomes.append(message.ack().result(10))  # blocks this handler thread until confirmed
        with redq.Subscriber(self.addr) as subscriber, redq.Client(self.addr) as client:
            sub = subscriber.subscribe(topic, "s", handler, concurrency=3)
            sub.ready(10)
            self.assertEqual(client.get_subscription(topic, "s").name, "s")
            self.assertTrue(support.eventually_sync(lambda: len(outcomes) == 3))
            self.assertEqual(outcomes, [None] * 3)
            self.assertEqual(client.get_subscription(topic, "s").stats.acked_count, 3)
            self.assertEqual(sub.stats.acks_confirmed, 3)

            with redq.Publisher(self.addr) as publisher:
                publisher.publish_batch(topic, [b"d", b"e"]).result(10)
            plain = []
            other = subscriber.subscribe(topic, "t", plain.append, start="earliest", ack_linger=1.0)
            self.assertTrue(support.eventually_sync(lambda: len(plain) == 5))
            other.flush(10)  # the lingering acks go now, and are confirmed
            self.assertEqual(client.get_subscription(topic, "t").stats.acked_count, 5)

            refused = subscriber.subscribe("bad topic!", "s", handler)
            with self.assertRaises(redq.RedqError) as caught:
                refused.ready(10)
            self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_admin_methods_and_one_shared_connection(self):
        topic = support.topic("syncadmin")
        proxy = support.Proxy(self.addr)
        try:
            with redq.connect(proxy.addr) as connection:
                with redq.Client(channel=connection) as client, redq.Publisher(channel=connection) as publisher, \
                        redq.Subscriber(channel=connection) as subscriber:
                    created = client.create_topic(topic, dedupe_window=datetime.timedelta(minutes=5))
                    self.assertEqual(created.settings.dedupe_window, datetime.timedelta(minutes=5))
                    publisher.publish(topic, b"shared").result(10)
                    got = []
                    sub = subscriber.subscribe(topic, "s", got.append)
                    self.assertTrue(support.eventually_sync(lambda: got))
                    sub.close()
                    self.assertEqual(client.get_subscription(topic, "s").stats.acked_count, 1)
                    self.assertEqual(client.get_topic(topic).stats.published_count, 1)
                self.assertEqual(proxy.connections, 1, "one connection for the three")
                with redq.Client(channel=connection) as client:  # closing them left the connection open
                    self.assertEqual([t.name for t in client.list_topics(page_size=1000).items].count(topic), 1)
                    client.delete_topic(topic)
        finally:
            proxy.close()
        with self.assertRaises(TypeError):
            redq.Client(channel=grpc.insecure_channel(self.addr))

    def test_unknown_options_are_type_errors_naming_them(self):
        with self.assertRaises(TypeError) as caught:
            redq.Publisher(self.addr, batchSize=5)
        self.assertIn("'batchSize'", str(caught.exception))
        self.assertIn("max_batch_messages", str(caught.exception))
        with redq.Client(self.addr) as client:
            with self.assertRaises(TypeError) as caught:
                client.admin_stub.GetSubscription(topic="t", nmae="s")
            self.assertIn("'nmae'", str(caught.exception))
            with self.assertRaises(TypeError):
                client.get_topic("t", nmae="x")
        with self.assertRaises(TypeError):
            redq.Subscriber(self.addr, max_outstanding=5)


if __name__ == "__main__":
    unittest.main()
