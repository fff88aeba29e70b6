#!/usr/bin/env node
// Speed of a Pub/Sub v1 server through the official Node client (@google-cloud/pubsub).
//
// Runs against whatever PUBSUB_EMULATOR_HOST points at (redq or Google's emulator)
// the three rows of scripts/pubsub-bench.sh, each with the client's default batching
// and flow control:
//
//   publish   COUNT messages of 100 bytes, every promise awaited;
//   receive   the COUNT just published (an untimed backlog for this row) read and
//             acked with the streaming subscriber, timed from the 'message' listener
//             (which opens the streams) to the callback that acks the last distinct
//             message;
//   latency   RATE msg/s paced for SECONDS s, the publish time (CLOCK_MONOTONIC, which
//             every process shares) in an attribute; a second process subscribes and
//             takes callback time - publish time.
//
// Prints one JSON object per row on stdout (the fields of bench.py's), progress on
// stderr. With --pids label=PID,... each row also gives the CPU time those processes
// (the server's) used during the row, from /proc/PID/stat. Every wait is bounded; a
// row that runs out of time is reported incomplete and the program goes on.
//
// The client is the one clients/pubsub/node installs (npm ci there, or
// clients/pubsub/test.sh --install-only node).
//
// Usage: PUBSUB_EMULATOR_HOST=127.0.0.1:50051 node bench.mjs [--count N] [--rate R]
//        [--seconds S] [--warmup N] [--pids redq=1,redis-server=2] [--project P]

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

// Without credentials the auth library would probe the GCE metadata server for each stub.
process.env.METADATA_SERVER_DETECTION ??= 'none';
const require = createRequire(new URL('../node/package.json', import.meta.url));
const { PubSub } = require('@google-cloud/pubsub');

const PAYLOAD = Buffer.from(Array.from({ length: 100 }, (_, i) => i)); // 100 bytes
const RPC_TIMEOUT_MS = 10_000; // one admin call
const CLOSE_TIMEOUT_MS = 10_000; // a subscriber's close (acks flushed)
const CLEANUP_MS = 15_000; // deleting what the run made
const CLOCK_TICKS = 100; // USER_HZ: /proc's unit on Linux

const log = (text) => process.stderr.write(`bench.mjs: ${text}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const nowNs = () => process.hrtime.bigint(); // CLOCK_MONOTONIC, as Python's time.monotonic_ns
const seconds = () => performance.now() / 1000;

/** Resolves to the promise's value, or rejects after ms. */
function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** CPU seconds (user + system) of this process, of the given pids and of the machine. */
class Cpu {
  constructor(pids) {
    this.pids = pids; // label -> pid
  }

  static ofPid(pid) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // The command name may hold spaces and parentheses: fields count from the last ')'.
      const fields = stat.slice(stat.lastIndexOf(')') + 1).trim().split(/\s+/);
      return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS; // utime, stime
    } catch {
      return null;
    }
  }

  static machineBusy() {
    const values = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const idle = values[3] + values[4]; // idle + iowait
    return (values.slice(0, 8).reduce((a, b) => a + b, 0) - idle) / CLOCK_TICKS;
  }

  snapshot() {
    const usage = process.cpuUsage();
    const server = {};
    for (const [label, pid] of Object.entries(this.pids)) server[label] = Cpu.ofPid(pid);
    return { wall: seconds(), client: (usage.user + usage.system) / 1e6, server, machine: Cpu.machineBusy() };
  }

  static spent(before, after) {
    const server = {};
    for (const [label, start] of Object.entries(before.server)) {
      const end = after.server[label];
      server[label] = start === null || end === null ? null : round(end - start, 3);
    }
    return {
      window_s: round(after.wall - before.wall, 3),
      client_cpu_s: round(after.client - before.client, 3),
      server_cpu_s: server,
      machine_busy_s: round(after.machine - before.machine, 3),
    };
  }
}

const round = (value, digits) => Math.round(value * 10 ** digits) / 10 ** digits;

function rowRecord(row, expected, messages, secs, cpu, extra = {}) {
  const record = {
    lang: 'node',
    row,
    expected,
    messages,
    complete: messages >= expected,
    seconds: round(secs, 4),
    rate: secs > 0 ? round(messages / secs, 1) : null,
    ...cpu,
    ...extra,
  };
  process.stdout.write(`${JSON.stringify(record)}\n`);
  return record;
}

/** The topics and subscriptions of this run, deleted at the end (errors ignored). */
class Resources {
  constructor(pubsub) {
    this.pubsub = pubsub;
    this.run = randomUUID().slice(0, 8);
    this.made = [];
  }

  async topicWithSubscription(name) {
    const id = `bench-node-${this.run}-${name}`;
    const gaxOpts = { timeout: RPC_TIMEOUT_MS };
    const [topic] = await bounded(this.pubsub.createTopic({ name: id, gaxOpts }), RPC_TIMEOUT_MS, 'createTopic');
    this.made.push(topic);
    const [subscription] = await bounded(topic.createSubscription(id, { gaxOpts }), RPC_TIMEOUT_MS, 'createSubscription');
    this.made.push(subscription);
    return id;
  }

  /** Within CLEANUP_MS in all: a server that stopped answering costs no more. */
  async delete() {
    const end = Date.now() + CLEANUP_MS;
    for (const thing of this.made.reverse()) {
      const left = Math.min(RPC_TIMEOUT_MS, end - Date.now());
      if (left < 500) {
        log(`cleanup: out of time, ${thing.name} left`);
        continue;
      }
      try {
        await bounded(thing.delete({ timeout: left }), left, 'delete');
      } catch (err) {
        log(`deleting ${thing.name}: ${err.message}`);
      }
    }
  }
}

/**
 * Publishes count messages, awaits every promise: { published, failed, secs, phases };
 * phases says when, in seconds from the start, the last publishMessage() call returned
 * and the first promise resolved.
 */
async function publishAll(topic, count, budgetMs) {
  const start = seconds();
  const results = [];
  let first = null;
  for (let i = 0; i < count; i++) results.push(topic.publishMessage({ data: PAYLOAD }));
  const callsDone = seconds();
  results[0]?.then(() => { first = seconds(); }, () => {});
  let published = 0;
  let failed = 0;
  const settled = Promise.all(
    results.map((p) => p.then(() => { published++; }, () => { failed++; })),
  );
  try {
    await bounded(settled, Math.max(100, budgetMs - (seconds() - start) * 1000), 'publish');
  } catch (err) {
    log(err.message);
  }
  const secs = seconds() - start;
  const phases = {
    calls_s: round(callsDone - start, 4),
    first_confirm_s: first === null ? null : round(first - start, 4),
  };
  return { published, failed: count - published, secs, phases };
}

/** Closes a subscription's streams within a bound (queued acks are flushed first). */
async function close(subscription) {
  try {
    await bounded(subscription.close(), CLOSE_TIMEOUT_MS, 'closing the subscriber');
  } catch (err) {
    log(err.message);
  }
  subscription.removeAllListeners();
}

/**
 * Streams the subscription until count distinct messages were acked, or budgetMs.
 * Returns { distinct, deliveries, secs (to the last distinct ack), first (to the first
 * delivery) }; the subscriber is closed before it returns.
 */
async function receiveAll(pubsub, name, count, budgetMs) {
  const subscription = pubsub.subscription(name);
  const seen = new Set();
  let deliveries = 0;
  let first = null;
  let last = null;
  let done;
  const allIn = new Promise((resolve) => { done = resolve; });
  const start = seconds();
  subscription.on('error', (err) => log(`subscriber error: ${err.message}`));
  subscription.on('message', (message) => {
    message.ack();
    deliveries++;
    first ??= seconds();
    if (!seen.has(message.id)) {
      seen.add(message.id);
      last = seconds();
      if (seen.size >= count) done();
    }
  });
  try {
    await bounded(allIn, budgetMs, 'receive');
  } catch (err) {
    log(err.message);
  }
  await close(subscription);
  return {
    distinct: seen.size,
    deliveries,
    secs: (last ?? seconds()) - start,
    first: (first ?? start) - start,
  };
}

function percentile(sorted, fraction) {
  if (sorted.length === 0) return null;
  return sorted[Math.max(1, Math.ceil(fraction * sorted.length)) - 1]; // nearest rank
}

/**
 * The second process of the latency row: prints "warm" on the first warm-up message,
 * then one JSON line of latencies once it has --expect timed messages, or its stdin
 * ended and --grace s passed, or --budget s passed.
 */
async function latencySubscriber(opts) {
  const pubsub = new PubSub({ projectId: opts.project });
  const subscription = pubsub.subscription(opts.subscription);
  const expect = Number(opts.expect);
  const latencies = [];
  const seen = new Set();
  let deliveries = 0;
  let warmCpu = null;
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  subscription.on('error', (err) => log(`latency subscriber error: ${err.message}`));
  subscription.on('message', (message) => {
    const now = nowNs();
    message.ack();
    const { attributes } = message;
    if (attributes.warmup === '1') {
      if (warmCpu === null) {
        const usage = process.cpuUsage();
        warmCpu = (usage.user + usage.system) / 1e6;
        process.stdout.write('warm\n');
      }
      return;
    }
    deliveries++;
    if (seen.has(attributes.seq)) return;
    seen.add(attributes.seq);
    latencies.push(Number(now - BigInt(attributes.t)) / 1e6);
    if (seen.size >= expect) done();
  });
  process.stdin.on('end', () => setTimeout(done, Number(opts.grace) * 1000));
  process.stdin.resume();
  const budget = setTimeout(done, Number(opts.budget) * 1000);
  await finished;
  clearTimeout(budget);
  const usage = process.cpuUsage();
  const cpu = (usage.user + usage.system) / 1e6 - (warmCpu ?? 0);
  await close(subscription);
  latencies.sort((a, b) => a - b);
  const result = {
    received: seen.size,
    deliveries,
    p50_ms: percentile(latencies, 0.5),
    p99_ms: percentile(latencies, 0.99),
    max_ms: latencies.length ? latencies[latencies.length - 1] : null,
    mean_ms: latencies.length ? latencies.reduce((a, b) => a + b, 0) / latencies.length : null,
    cpu_s: cpu,
  };
  process.stdout.write(`${JSON.stringify(result)}\n`, () => process.exit(0));
}

async function latencyRow(opts, pubsub, resources, cpu) {
  const name = await resources.topicWithSubscription('latency');
  const rate = Number(opts.rate);
  const expect = Math.round(rate * Number(opts.seconds));
  const child = spawn(
    process.execPath,
    [fileURLToPath(import.meta.url), 'latency-subscriber', '--subscription', name,
      '--expect', String(expect), '--grace', '10', '--budget', String(Number(opts.seconds) + 60),
      '--project', opts.project],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  let output = '';
  child.stdout.on('data', (chunk) => { output += chunk; });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const topic = pubsub.topic(name);
  try {
    // Warm-up messages every 20 ms until the subscriber has one: its streams are open.
    const warmEnd = seconds() + 20;
    while (!output.includes('warm\n') && seconds() < warmEnd && child.exitCode === null) {
      topic.publishMessage({ data: PAYLOAD, attributes: { warmup: '1', t: String(nowNs()) } }).catch(() => {});
      await sleep(20);
    }
    if (!output.includes('warm\n')) {
      log('latency: the subscriber received no warm-up message within 20 s');
      return rowRecord('latency', expect, 0, 0, Cpu.spent(cpu.snapshot(), cpu.snapshot()));
    }
    const before = cpu.snapshot();
    const promises = [];
    const confirms = []; // publish call -> its promise resolved, ms: the publisher's share
    const start = seconds();
    let seq = 0;
    // Publish what is due, then yield for about a millisecond: setTimeout's granularity.
    while (seq < expect) {
      const due = Math.min(expect, Math.floor((seconds() - start) * rate) + 1);
      for (; seq < due; seq++) {
        const sent = nowNs();
        const published = topic.publishMessage({ data: PAYLOAD, attributes: { seq: String(seq), t: String(sent) } });
        published.then(() => confirms.push(Number(nowNs() - sent) / 1e6), () => {});
        promises.push(published);
      }
      if (seq < expect) await sleep(Math.max(0, (start + seq / rate - seconds()) * 1000));
    }
    const publishSecs = seconds() - start;
    let publishFailed = 0;
    try {
      await bounded(Promise.all(promises.map((p) => p.catch(() => { publishFailed++; }))), 30_000, 'latency publish');
    } catch (err) {
      log(err.message);
    }
    child.stdin.end(); // the subscriber gives the stragglers --grace s more
    try {
      await bounded(exited, (Number(opts.seconds) + 90) * 1000, 'latency subscriber');
    } catch (err) {
      log(err.message);
    }
    const spent = Cpu.spent(before, cpu.snapshot());
    const line = output.split('\n').find((l) => l.startsWith('{'));
    if (!line) {
      log('latency: the subscriber printed no result');
      return rowRecord('latency', expect, 0, publishSecs, spent);
    }
    const result = JSON.parse(line);
    confirms.sort((a, b) => a - b);
    const publisherCpu = spent.client_cpu_s;
    spent.client_cpu_s = round(spent.client_cpu_s + result.cpu_s, 3);
    return rowRecord('latency', expect, result.received, publishSecs, spent, {
      p50_ms: result.p50_ms,
      p99_ms: result.p99_ms,
      max_ms: result.max_ms,
      mean_ms: result.mean_ms,
      duplicates: result.deliveries - result.received,
      confirm_p50_ms: percentile(confirms, 0.5),
      confirm_p99_ms: percentile(confirms, 0.99),
      publish_failed: publishFailed,
      publisher_cpu_s: publisherCpu,
      subscriber_cpu_s: round(result.cpu_s, 3),
    });
  } finally {
    if (child.exitCode === null) {
      child.stdin.end();
      try {
        await bounded(exited, 15_000, 'latency subscriber exit');
      } catch {
        child.kill('SIGKILL');
      }
    }
  }
}

async function main() {
  const { values: opts, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      project: { type: 'string', default: process.env.GOOGLE_CLOUD_PROJECT ?? 'demo' },
      count: { type: 'string', default: '100000' },
      warmup: { type: 'string', default: '2000' },
      rate: { type: 'string', default: '1000' },
      seconds: { type: 'string', default: '10' },
      rows: { type: 'string', default: 'publish,receive,latency' },
      pids: { type: 'string', default: '' },
      subscription: { type: 'string' },
      expect: { type: 'string' },
      grace: { type: 'string', default: '10' },
      budget: { type: 'string', default: '120' },
    },
  });
  if (positionals[0] === 'latency-subscriber') {
    await latencySubscriber(opts);
    return;
  }
  if (!process.env.PUBSUB_EMULATOR_HOST) {
    log('set PUBSUB_EMULATOR_HOST=host:port');
    process.exit(2);
  }
  const pids = {};
  for (const item of opts.pids.split(',').filter(Boolean)) {
    const [label, pid] = item.split('=');
    pids[label] = Number(pid);
  }
  const rows = new Set(opts.rows.split(','));
  const count = Number(opts.count);
  const warmup = Number(opts.warmup);
  const cpu = new Cpu(pids);
  // Rows run for at most this long each: 500 msg/s at least, a minute at least.
  const budgetMs = Math.max(60_000, (count / 500) * 1000);
  const pubsub = new PubSub({ projectId: opts.project });
  const resources = new Resources(pubsub);
  try {
    if (warmup > 0) {
      // The same work, small and untimed: JIT, connections and caches warm on both sides.
      const name = await resources.topicWithSubscription('warmup');
      await publishAll(pubsub.topic(name), warmup, 30_000);
      const { distinct } = await receiveAll(pubsub, name, warmup, 30_000);
      log(`warm-up: ${distinct} of ${warmup} received`);
    }
    if (rows.has('publish') || rows.has('receive')) {
      const name = await resources.topicWithSubscription('throughput');
      // A client of its own: the warm-up's batches and streams are not in its way.
      const client = new PubSub({ projectId: opts.project });
      let before = cpu.snapshot();
      const { published, failed, secs, phases } = await publishAll(client.topic(name), count, budgetMs);
      rowRecord('publish', count, published, secs, Cpu.spent(before, cpu.snapshot()), { failed, ...phases });
      log(`publish: ${published} in ${secs.toFixed(2)} s`);
      if (rows.has('receive')) {
        before = cpu.snapshot();
        const got = await receiveAll(client, name, published, budgetMs);
        rowRecord('receive', published, got.distinct, got.secs, Cpu.spent(before, cpu.snapshot()), {
          duplicates: got.deliveries - got.distinct,
          first_delivery_s: round(got.first, 4),
        });
        log(`receive: ${got.distinct} in ${got.secs.toFixed(2)} s`);
      }
      await client.close().catch(() => {});
    }
    if (rows.has('latency')) {
      const record = await latencyRow(opts, pubsub, resources, cpu);
      log(`latency: ${record.messages} received, p50 ${record.p50_ms} ms, p99 ${record.p99_ms} ms`);
    }
  } finally {
    await resources.delete();
  }
  // The client's channels and timers must not hold the exit.
  process.stdout.write('', () => process.exit(0));
}

main().catch((err) => {
  log(`failed: ${err.stack ?? err}`);
  process.exit(1);
});
