#!/usr/bin/env python3
"""Benchmarks of the redq Python client: the library (redq.aio, optionally the
sync redq API) against raw generated stubs on the unary API.

Workloads, each on a fresh topic with 100-byte payloads:
  publish1  single-message publishes, 50 outstanding
  consume   consume + ack a backlog (published beforehand), 100 outstanding
  e2e       end to end at 2,000 msg/s, consumer in another process: p50/p99 latency
  batch     batches of 1,000 (library: publish_batch, and 1,000 publish() + flush)

    python bench/bench.py [--addr HOST:PORT] [--count N] [--quick] [--json FILE]
                          [--pids REDQ_PID,REDIS_PID] [--only publish1,e2e] [--impl lib,raw,sync]
                          [--ack-linger SECONDS]  (the Subscriber's ack_linger; default the library's)
                          [--explicit-ack]  (consume: the handler calls message.ack(), which asks for a
                                             confirmation, instead of returning)
                          [--async-handler]  (consume: an `async def` handler instead of a plain function)

Prints a Markdown table: msg/s (or latency), and CPU per message of the client
process(es) and, with --pids, of the server processes (/proc/PID/stat).
"""

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid

try:
    import redq
except ImportError:  # run from the repository without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import redq
import grpc  # noqa: E402

import redq.aio  # noqa: E402

pb, pb_grpc = redq.queue_pb2, redq.queue_pb2_grpc
PAYLOAD = b"x" * 100
RATE = 2000  # msg/s of the e2e workload
CLK_TCK = os.sysconf("SC_CLK_TCK")
PUBLISHER_OPTIONS = {}  # --no-auto-dedupe: {"auto_dedupe": False}
SUBSCRIBER_OPTIONS = {}  # of consume and e2e; --ack-linger: {"ack_linger": SECONDS}


def cpu_self():
    """User+system CPU seconds of this process (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


class Measure:
    """Wall time, this process's CPU and the server processes' CPU over a workload."""

    def __init__(self, pids):
        self.pids = pids

    def __enter__(self):
        self.t0, self.cpu0 = time.perf_counter(), cpu_self()
        self.server0 = [cpu_of(p) for p in self.pids]
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = cpu_self() - self.cpu0
        self.server = [cpu_of(p) - c for p, c in zip(self.pids, self.server0)]


def topic(name):
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


def row(workload, impl, count, m, extra_cpu=0.0, **figures):
    result = {"workload": workload, "impl": impl, "count": count, "seconds": round(m.wall, 3),
              "client_cpu_us_per_msg": round((m.cpu + extra_cpu) / count * 1e6, 2)}
    if "p50_ms" not in figures:
        result["msg_per_s"] = round(count / m.wall)
    result.update(figures)
    for name, cpu in zip(("redq", "redis"), m.server):
        result[f"{name}_cpu_us_per_msg"] = round(cpu / count * 1e6, 2)
    return result


async def prepublish(addr, name, count):
    """A backlog of count messages, by raw Publish calls of 1,000."""
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        for start in range(0, count, 1000):
            n = min(1000, count - start)
            await stub.Publish(pb.PublishRequest(topic=name, messages=[pb.PublishMessage(payload=PAYLOAD)] * n))


# ---- 1. single-message publishes, 50 outstanding

async def publish1_lib(args, pids):
    name = topic("publish1-lib")
    async with redq.aio.Publisher(args.addr, **PUBLISHER_OPTIONS) as publisher:
        await publisher.publish(name, PAYLOAD)  # the stream is open before timing
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        state = {"sent": 0, "finished": 0, "errors": 0}
        count = args.count

        def on_done(future):  # keeps 50 in flight: each answer publishes the next
            state["finished"] += 1
            if future.exception() is not None:
                state["errors"] += 1
            if state["sent"] < count:
                state["sent"] += 1
                publisher.publish(name, PAYLOAD).add_done_callback(on_done)
            elif state["finished"] == count and not done.done():
                done.set_result(None)
        with Measure(pids) as m:
            for _ in range(min(args.outstanding, count)):
                state["sent"] += 1
                publisher.publish(name, PAYLOAD).add_done_callback(on_done)
            await done
        check(state["errors"] == 0, f"{state['errors']} publishes failed")
        stats = publisher.stats
    return row("publish1", "lib", count, m, requests=stats.requests_sent)


async def publish1_raw(args, pids):
    name = topic("publish1-raw")
    async with grpc.aio.insecure_channel(args.addr) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        await stub.Publish(pb.PublishRequest(topic=name, messages=[pb.PublishMessage(payload=PAYLOAD)]))
        left = [args.count]

        async def worker():
            while left[0] > 0:
                left[0] -= 1
                await stub.Publish(pb.PublishRequest(topic=name, messages=[pb.PublishMessage(payload=PAYLOAD)]))
        with Measure(pids) as m:
            await asyncio.gather(*(worker() for _ in range(args.outstanding)))
    return row("publish1", "raw", args.count, m)


def publish1_sync(args, pids):
    name = topic("publish1-sync")
    with redq.Publisher(args.addr, **PUBLISHER_OPTIONS) as publisher:
        publisher.publish(name, PAYLOAD).result()
        window = threading.Semaphore(args.outstanding)
        finished = threading.Event()
        state = {"finished": 0}
        lock = threading.Lock()

        def on_done(_):
            window.release()
            with lock:
                state["finished"] += 1
                if state["finished"] == args.count:
                    finished.set()
        with Measure(pids) as m:
            for _ in range(args.count):
                window.acquire()
                publisher.publish(name, PAYLOAD).add_done_callback(on_done)
            finished.wait()
    return row("publish1", "sync", args.count, m)


# ---- 2. consume + ack a backlog, 100 outstanding

async def consume_lib(args, pids):
    name = topic("consume-lib")
    await prepublish(args.addr, name, args.count)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    seen = [0]
    explicit = args.explicit_ack

    def handler(message):  # a plain function: returning acks (--explicit-ack: message.ack(), confirmed)
        if explicit:
            message.ack()
        seen[0] += 1
        if seen[0] == args.count:
            done.set_result(None)
    if args.async_handler:
        plain = handler

        async def handler(message):  # the same as a coroutine function: run by worker tasks
            plain(message)
    subscriber = redq.aio.Subscriber(args.addr)
    with Measure(pids) as m:
        sub = subscriber.subscribe(name, "bench", handler, max_outstanding=100, **SUBSCRIBER_OPTIONS)
        await done
        await sub.close()  # the last acks are sent
    await subscriber.close()
    await check_acked(args.addr, name, args.count)
    impl = "lib" + (": async def" if args.async_handler else "") + (": message.ack()" if explicit else "")
    return row("consume", impl, args.count, m, requests=sub.stats.requests_sent)


async def consume_raw(args, pids):
    name = topic("consume-raw")
    await prepublish(args.addr, name, args.count)
    async with grpc.aio.insecure_channel(args.addr) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        with Measure(pids) as m:
            call = stub.Subscribe(pb.SubscribeRequest(topic=name, subscription="bench", max_outstanding_messages=100))
            seen, acks = 0, []
            async for response in call:
                ids = [r.ack_id for r in response.messages]
                seen += len(ids)
                acks.append(asyncio.ensure_future(stub.Ack(pb.AckRequest(topic=name, subscription="bench",
                                                                         ack_ids=ids))))
                if seen >= args.count:
                    break
            await asyncio.gather(*acks)
            call.cancel()
    await check_acked(args.addr, name, args.count)
    return row("consume", "raw", args.count, m)


def consume_sync(args, pids):
    name = topic("consume-sync")
    asyncio.run(prepublish(args.addr, name, args.count))
    done = threading.Event()
    lock = threading.Lock()
    seen = [0]

    def handler(message):
        with lock:
            seen[0] += 1
            if seen[0] == args.count:
                done.set()
    with redq.Subscriber(args.addr) as subscriber:
        with Measure(pids) as m:
            sub = subscriber.subscribe(name, "bench", handler, max_outstanding=100, concurrency=4, **SUBSCRIBER_OPTIONS)
            done.wait()
            sub.close()
    asyncio.run(check_acked(args.addr, name, args.count))
    return row("consume", "sync", args.count, m)


async def check_acked(addr, name, count):
    async with redq.aio.Client(addr) as client:
        stats = (await client.get_subscription(name, "bench")).stats
    check(stats.acked_count == count and stats.pending == 0,
          f"{name}: acked {stats.acked_count} of {count}, {stats.pending} pending")


# ---- 3. end to end at 2,000 msg/s, consumer in another process

def shared_clock_ms():
    """The machine's monotonic clock, which every process shares (the wall
    clock may be stepped between the two processes' reads)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC) * 1000


def stamp():
    return (b"%.4f " % shared_clock_ms()).ljust(100, b"x")


async def e2e(args, pids, impl):
    name = topic(f"e2e-{impl}")
    warmup = 20
    consumer = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "_consumer", "--impl", impl, "--addr", args.addr,
         "--topic", name, "--count", str(args.count), "--warmup", str(warmup)]
        + ([] if args.ack_linger is None else ["--ack-linger", str(args.ack_linger)]),
        stdout=subprocess.PIPE, text=True)
    try:
        async with grpc.aio.insecure_channel(args.addr) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            publisher = redq.aio.Publisher(args.addr, **PUBLISHER_OPTIONS) if impl == "lib" else None
            if impl == "lib":
                def send(payload):
                    return publisher.publish(name, payload)
            else:
                def send(payload):
                    return asyncio.ensure_future(
                        stub.Publish(pb.PublishRequest(topic=name, messages=[pb.PublishMessage(payload=payload)])))
            # Warm-up messages until the consumer has one: then its stream is up.
            ready = asyncio.get_running_loop().run_in_executor(None, consumer.stdout.readline)
            for _ in range(warmup):
                await send(b"warmup".ljust(100, b"x"))
            check((await asyncio.wait_for(ready, 30)).strip() == "READY", "the consumer did not start")
            # Count answers rather than keep 100,000 futures: a long list of
            # live objects would make the garbage collector's full passes slow.
            answered = asyncio.get_running_loop().create_future()
            state = {"left": args.count, "errors": 0}

            def on_answer(future):
                state["left"] -= 1
                if future.cancelled() or future.exception() is not None:
                    state["errors"] += 1
                if not state["left"]:
                    answered.set_result(None)
            with Measure(pids) as m:
                start, sent = time.perf_counter(), 0
                while sent < args.count:
                    due = min(args.count, int((time.perf_counter() - start) * RATE) + 1)
                    while sent < due:
                        send(stamp()).add_done_callback(on_answer)
                        sent += 1
                    await asyncio.sleep(0.0005)
                await answered
                out, _ = await asyncio.get_running_loop().run_in_executor(None, consumer.communicate)
            check(state["errors"] == 0, f"{state['errors']} publishes failed")
            if publisher is not None:
                await publisher.close()
    finally:
        if consumer.poll() is None:
            consumer.kill()
    result = json.loads(out)
    return row("e2e", impl, args.count, m, extra_cpu=result["cpu"], p50_ms=result["p50"], p99_ms=result["p99"],
               p90_ms=result["p90"], p999_ms=result["p999"], max_ms=result["max"],
               producer_cpu_us_per_msg=round(m.cpu / args.count * 1e6, 2),
               consumer_cpu_us_per_msg=round(result["cpu"] / args.count * 1e6, 2))


def consumer_main(args):
    """The e2e consumer process: prints READY, then one JSON line with latencies and its CPU."""
    latencies = []
    total = args.count
    state = {"cpu0": None, "warm": 0}

    def record(payload):
        now = shared_clock_ms()
        if payload.startswith(b"warmup"):
            if state["cpu0"] is None:
                state["cpu0"] = cpu_self()
                print("READY", flush=True)
            return False
        latencies.append(now - float(payload[:payload.index(b" ")]))
        return len(latencies) >= total

    async def run_lib():
        done = asyncio.get_running_loop().create_future()

        def handler(message):
            if record(message.payload) and not done.done():
                done.set_result(None)
        subscriber = redq.aio.Subscriber(args.addr)
        sub = subscriber.subscribe(args.topic, "e2e", handler, max_outstanding=1000, **SUBSCRIBER_OPTIONS)
        await done
        await sub.close()
        await subscriber.close()

    async def run_raw():
        async with grpc.aio.insecure_channel(args.addr) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            call = stub.Subscribe(pb.SubscribeRequest(topic=args.topic, subscription="e2e",
                                                      max_outstanding_messages=1000))
            acks, finished = [], False
            async for response in call:
                for received in response.messages:
                    finished = record(received.message.payload) or finished
                acks.append(asyncio.ensure_future(stub.Ack(pb.AckRequest(
                    topic=args.topic, subscription="e2e", ack_ids=[r.ack_id for r in response.messages]))))
                if finished:
                    break
            await asyncio.gather(*acks)
            call.cancel()
    asyncio.run(run_lib() if args.impl == "lib" else run_raw())
    latencies.sort()
    cpu = cpu_self() - state["cpu0"]
    pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)  # noqa: E731
    print(json.dumps({"p50": pick(0.50), "p99": pick(0.99), "cpu": cpu, "p90": pick(0.9), "p95": pick(0.95),
                      "p999": pick(0.999), "max": round(latencies[-1], 3)}), flush=True)


# ---- 4. batches of 1,000

async def batch_lib(args, pids):
    name = topic("batch-lib")
    async with redq.aio.Publisher(args.addr, **PUBLISHER_OPTIONS) as publisher:
        await publisher.publish(name, PAYLOAD)
        payloads = [PAYLOAD] * 1000
        with Measure(pids) as m:
            for _ in range(args.count // 1000):
                await publisher.publish_batch(name, payloads)
    return row("batch", "lib", args.count // 1000 * 1000, m)


async def batch_lib_flush(args, pids):
    name = topic("batch-lib-flush")
    async with redq.aio.Publisher(args.addr, **PUBLISHER_OPTIONS) as publisher:
        await publisher.publish(name, PAYLOAD)
        with Measure(pids) as m:
            for _ in range(args.count // 1000):
                for _ in range(1000):
                    publisher.publish(name, PAYLOAD)
                await publisher.flush()
    return row("batch", "lib: publish()+flush", args.count // 1000 * 1000, m)


async def batch_raw(args, pids):
    name = topic("batch-raw")
    async with grpc.aio.insecure_channel(args.addr) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        await stub.Publish(pb.PublishRequest(topic=name, messages=[pb.PublishMessage(payload=PAYLOAD)]))
        with Measure(pids) as m:
            for _ in range(args.count // 1000):
                request = pb.PublishRequest(topic=name)
                add = request.messages.add
                for _ in range(1000):
                    add(payload=PAYLOAD)
                await stub.Publish(request)
    return row("batch", "raw", args.count // 1000 * 1000, m)


def batch_sync(args, pids):
    name = topic("batch-sync")
    with redq.Publisher(args.addr, **PUBLISHER_OPTIONS) as publisher:
        publisher.publish(name, PAYLOAD).result()
        payloads = [PAYLOAD] * 1000
        with Measure(pids) as m:
            for _ in range(args.count // 1000):
                publisher.publish_batch(name, payloads).result()
    return row("batch", "sync", args.count // 1000 * 1000, m)


def check(condition, what):
    if not condition:
        raise SystemExit(f"bench: FAIL: {what}")


WORKLOADS = {
    "publish1": {"lib": publish1_lib, "raw": publish1_raw, "sync": publish1_sync},
    "consume": {"lib": consume_lib, "raw": consume_raw, "sync": consume_sync},
    "e2e": {"lib": lambda a, p: e2e(a, p, "lib"), "raw": lambda a, p: e2e(a, p, "raw")},
    "batch": {"lib": batch_lib, "lib-flush": batch_lib_flush, "raw": batch_raw, "sync": batch_sync},
}


def table(rows):
    header = ["workload", "impl", "msg/s", "p50 ms", "p99 ms", "client CPU µs/msg", "redq CPU µs/msg",
              "redis CPU µs/msg"]
    keys = ["workload", "impl", "msg_per_s", "p50_ms", "p99_ms", "client_cpu_us_per_msg", "redq_cpu_us_per_msg",
            "redis_cpu_us_per_msg"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[k]:,}" if isinstance(r.get(k), int) else str(r.get(k, "")) for k in keys)
                     + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=["run", "_consumer"], help=argparse.SUPPRESS)
    parser.add_argument("--addr", default=os.environ.get("REDQ_ADDR"), help="redq host:port (default $REDQ_ADDR)")
    parser.add_argument("--count", type=int, default=100_000, help="messages per workload (default 100000)")
    parser.add_argument("--quick", action="store_true", help="2,000 messages per workload: a smoke run")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    parser.add_argument("--pids", default="", help="REDQ_PID,REDIS_PID: report their CPU per message too")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="workloads to run (default: all)")
    parser.add_argument("--impl", default="lib,lib-flush,raw",
                        help="lib, lib-flush, raw, sync (default: lib,lib-flush,raw)")
    parser.add_argument("--no-auto-dedupe", action="store_true",
                        help="library publishers without automatic dedupe ids (as the raw stubs publish)")
    parser.add_argument("--ack-linger", type=float, metavar="SECONDS",
                        help="the Subscriber's ack_linger in consume and e2e (default: the library's)")
    parser.add_argument("--async-handler", action="store_true",
                        help="consume (lib): an `async def` handler instead of a plain function")
    parser.add_argument("--explicit-ack", action="store_true",
                        help="consume (lib): the handler calls message.ack() (confirmed by the server) instead of "
                             "returning")
    parser.add_argument("--outstanding", type=int, default=50, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.addr:
        parser.error("no server: give --addr HOST:PORT or set REDQ_ADDR")
    if args.ack_linger is not None:
        SUBSCRIBER_OPTIONS["ack_linger"] = args.ack_linger
    if args.command == "_consumer":
        return consumer_main(args)
    if args.quick:
        args.count = 2000
    if args.no_auto_dedupe:
        PUBLISHER_OPTIONS["auto_dedupe"] = False
    pids = [int(p) for p in args.pids.split(",") if p]
    rows = []
    impls = args.impl.split(",")
    for workload in args.only.split(","):
        for impl, run in WORKLOADS[workload].items():
            if impl not in impls:
                continue
            result = run(args, pids)
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
            rows.append(result)
            print(f"bench: {workload} {impl}: {json.dumps(result)}", file=sys.stderr, flush=True)
    dedupe = "without" if args.no_auto_dedupe else "with"
    print(f"\nredq Python client, {args.count:,} messages of {len(PAYLOAD)} bytes per workload, server {args.addr}, "
          f"library publishers {dedupe} automatic dedupe ids\n")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
