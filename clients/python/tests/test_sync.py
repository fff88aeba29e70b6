"""The synchronous API (redq.Publisher, redq.Subscriber, redq.Client) against a live redq."""

import concurrent.futures
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
            self.assertLess(publisher.stats.requests, 1000)  # handed over and sent in batches

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
            stats = client.admin.GetSubscription(topic=topic, name="s").stats
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
            self.assertEqual(client.admin.GetSubscription(topic=topic, name="s").stats.acked_count, 1)

    def test_acks_settled_in_handler_threads_linger_and_close_sends_them(self):
        topic = support.topic("synclinger")
        linger = 2.0
        handled = []  # monotonic times the handler ran

        def acked(count):
            return client.admin.GetSubscription(topic=topic, name="s").stats.acked_count == count
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
            scheduled = client.schedule(topic, "in a minute", delay=60)
            self.assertTrue(client.reschedule(topic, scheduled.message_id, delay=120).rescheduled)
            self.assertTrue(client.cancel(topic, scheduled.message_id))
            with self.assertRaises(redq.RedqError) as caught:
                client.admin.GetSubscription(topic=topic, name="missing")
            self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_publish_error_on_the_future(self):
        with redq.Publisher(self.addr) as publisher:
            future = publisher.publish("bad topic!", b"x")
            with self.assertRaises(redq.RedqError) as caught:
                future.result(10)
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    unittest.main()
