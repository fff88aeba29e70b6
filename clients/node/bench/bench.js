#!/usr/bin/env node
// Benchmarks of the library against the raw grpc-js stubs on the unary API:
//   publish-1x50  single-message publishes, 50 outstanding
//   consume-ack   consume + ack a backlog, 100 outstanding
//   e2e-2000      end to end at 2,000 msg/s, consumer in another process: p50/p99
//   batch-1000    publishes in batches of 1,000
// Each on a fresh topic, 100-byte payloads. Prints a Markdown table with
// msg/s (or latency) and the CPU per message of the client (and, with
// --pids, of the redq server and redis-server).
//
//   node bench/bench.js [--addr HOST:PORT] [--count 100000] [--quick] [--runs 1]
//                       [--only lib,lib-nodedupe,raw] [--workloads a,b] [--pids REDQ,REDIS] [--json FILE]
//                       [--ack-linger MS]  (the Subscriber's ackLinger; default the library's)
//                       [--max-outstanding N] [--max-outstanding-bytes B]  (the Subscriber's flow
//                       control in consume-ack and e2e-2000; default 100 and the server's)

import { fork } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { connect, Publisher, Subscriber } from '../index.js';
import { cpuNow, fmt, inbox, median, procCpu, publishAtRate, rawStub, unary, warmUp } from './common.js';

const { values: opts } = parseArgs({
  options: {
    addr: { type: 'string', default: process.env.REDQ_ADDR },
    count: { type: 'string', default: '100000' },
    quick: { type: 'boolean', default: false },
    runs: { type: 'string', default: '1' },
    only: { type: 'string' },
    workloads: { type: 'string' },
    pids: { type: 'string' },
    json: { type: 'string' },
    'ack-linger': { type: 'string' },
    'max-outstanding': { type: 'string', default: '100' },
    'max-outstanding-bytes': { type: 'string' },
  },
});
if (!opts.addr) {
  console.error('bench: give --addr HOST:PORT or set REDQ_ADDR');
  process.exit(2);
}
const COUNT = opts.quick ? 2000 : Number(opts.count);
const RUNS = Number(opts.runs);
const PIDS = opts.pids ? opts.pids.split(',').map(Number) : [];
const PAYLOAD = Buffer.alloc(100, 0x61);
// The Subscriber options of consume-ack and e2e-2000: 100 outstanding, as the
// workloads are defined, and the library's own defaults, unless the options say otherwise.
const SUBSCRIBE = {
  maxOutstanding: Number(opts['max-outstanding']),
  ...(opts['ack-linger'] === undefined ? {} : { ackLinger: Number(opts['ack-linger']) }),
  ...(opts['max-outstanding-bytes'] === undefined ? {} : { maxOutstandingBytes: Number(opts['max-outstanding-bytes']) }),
};
const RATE = 2000; // msg/s of the end-to-end workload
const runId = randomBytes(4).toString('hex');
let topicSeq = 0;
const freshTopic = (name) => `bench-node-${runId}-${name}-${topicSeq++}`;

// Runs `body` (which returns the number of messages) and measures it.
async function measure(body) {
  const before = { cpu: cpuNow(), procs: PIDS.map(procCpu), t: performance.now() };
  const result = await body();
  const seconds = (performance.now() - before.t) / 1000;
  const cpu = cpuNow() - before.cpu + (result.otherCpuUs ?? 0);
  return {
    ...result,
    msgPerSec: result.count / seconds,
    cpuUsPerMsg: cpu / result.count,
    procUsPerMsg: PIDS.map((pid, i) => (procCpu(pid) - before.procs[i]) / result.count),
  };
}

// Resolves `promise`, or fails after `ms` (a stuck server must not hang CI).
function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no result after ${ms / 1000}s`)), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// Publishes `count` messages as fast as the library allows, to set up a backlog.
async function backlog(addr, topic, count) {
  const publisher = new Publisher(addr);
  for (let sent = 0; sent < count; ) {
    const n = Math.min(1000, count - sent);
    for (let i = 0; i < n; i++) publisher.publish(topic, PAYLOAD);
    sent += n;
    await publisher.flush();
  }
  await publisher.close();
}

// ------------------------------------------------------------- workloads

const workloads = {
  'publish-1x50': {
    async lib(addr, publisherOptions) {
      const topic = freshTopic('pub');
      const publisher = new Publisher(addr, publisherOptions);
      await publisher.publish(topic, PAYLOAD); // connected, stream open
      const r = await measure(async () => {
        let sent = 0;
        const worker = async () => {
          while (sent < COUNT) {
            sent++;
            await publisher.publish(topic, PAYLOAD);
          }
        };
        await Promise.all(Array.from({ length: 50 }, worker));
        return { count: COUNT };
      });
      await publisher.close();
      return r;
    },
    async raw(addr) {
      const topic = freshTopic('pub-raw');
      const stub = rawStub(addr);
      await unary(stub, 'Publish', { topic, messages: [{ payload: PAYLOAD }] });
      const r = await measure(async () => {
        let sent = 0;
        const worker = async () => {
          while (sent < COUNT) {
            sent++;
            await unary(stub, 'Publish', { topic, messages: [{ payload: PAYLOAD }] });
          }
        };
        await Promise.all(Array.from({ length: 50 }, worker));
        return { count: COUNT };
      });
      stub.close();
      return r;
    },
  },

  'consume-ack': {
    async lib(addr) {
      const topic = freshTopic('consume');
      await backlog(addr, topic, COUNT);
      const subscriber = new Subscriber(addr);
      const r = await measure(async () => {
        let n = 0;
        let done;
        const all = new Promise((resolve) => (done = resolve));
        subscriber.subscribe(topic, 'bench', () => {
          if (++n === COUNT) done();
        }, SUBSCRIBE);
        await all;
        await subscriber.close(); // the last acks applied
        return { count: COUNT };
      });
      return r;
    },
    async raw(addr) {
      const topic = freshTopic('consume-raw');
      await backlog(addr, topic, COUNT);
      const stub = rawStub(addr);
      const subscription = 'bench';
      const r = await measure(async () => {
        let acked = 0;
        let done;
        const all = new Promise((resolve) => (done = resolve));
        const call = stub.Subscribe({ topic, subscription, maxOutstandingMessages: 100 });
        call.on('data', (res) => {
          const ackIds = res.messages.map((m) => m.ackId);
          unary(stub, 'Ack', { topic, subscription, ackIds }).then(() => {
            acked += ackIds.length;
            if (acked >= COUNT) done();
          });
        });
        call.on('error', () => {});
        await all;
        call.cancel();
        return { count: COUNT };
      });
      stub.close();
      return r;
    },
  },

  'e2e-2000': {
    lib: (addr, publisherOptions) => endToEnd(addr, 'lib', publisherOptions),
    raw: (addr) => endToEnd(addr, 'raw'),
  },

  'batch-1000': {
    async lib(addr, publisherOptions) {
      const topic = freshTopic('batch');
      const publisher = new Publisher(addr, publisherOptions);
      await publisher.publish(topic, PAYLOAD);
      const r = await measure(async () => {
        for (let sent = 0; sent < COUNT; sent += 1000) {
          for (let i = 0; i < 1000; i++) publisher.publish(topic, PAYLOAD);
          await publisher.flush();
        }
        return { count: COUNT };
      });
      await publisher.close();
      return r;
    },
    async raw(addr) {
      const topic = freshTopic('batch-raw');
      const stub = rawStub(addr);
      const messages = Array.from({ length: 1000 }, () => ({ payload: PAYLOAD }));
      await unary(stub, 'Publish', { topic, messages: messages.slice(0, 1) });
      const r = await measure(async () => {
        for (let sent = 0; sent < COUNT; sent += 1000) await unary(stub, 'Publish', { topic, messages });
        return { count: COUNT };
      });
      stub.close();
      return r;
    },
  },
};

// The producer here, the consumer (consumer.js) in a process of its own.
async function endToEnd(addr, mode, publisherOptions) {
  const topic = freshTopic(`e2e-${mode}`);
  const subscription = 'bench';
  const child = fork(fileURLToPath(new URL('./consumer.js', import.meta.url)), [], { stdio: 'inherit' });
  const next = inbox(child);
  child.send({ addr, topic, subscription, count: COUNT, mode, subscribeOptions: SUBSCRIBE });

  let publish;
  let close;
  if (mode === 'lib') {
    const publisher = new Publisher(addr, publisherOptions);
    publish = (payload) => publisher.publish(topic, payload);
    close = () => publisher.close();
  } else {
    const stub = rawStub(addr);
    publish = (payload) => unary(stub, 'Publish', { topic, messages: [{ payload }] });
    close = async () => stub.close();
  }
  // Warm-up, until the consumer has seen a message: its stream is up.
  await warmUp(publish, next('warm'));

  child.send({ type: 'start' });
  const done = next('done');
  const r = await measure(async () => {
    await publishAtRate(publish, COUNT, RATE);
    const report = await done;
    return { count: COUNT, p50: report.p50, p99: report.p99, otherCpuUs: report.cpuUs };
  });
  await close();
  await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve)));
  return r;
}

// ------------------------------------------------------------------ main

// Client kinds: the library as it comes, the library without automatic dedupe
// ids (where it publishes what is measured: the ids cost the server a dedupe
// check per message), and the raw stubs.
const KINDS = {
  lib: { label: 'library', run: (w, addr) => w.lib(addr, {}) },
  'lib-nodedupe': { label: 'library, autoDedupe: false', run: (w, addr) => w.lib(addr, { autoDedupe: false }), publishes: true },
  raw: { label: 'raw stubs (unary)', run: (w, addr) => w.raw(addr) },
};
const PUBLISHING = new Set(['publish-1x50', 'e2e-2000', 'batch-1000']);
const names = opts.workloads ? opts.workloads.split(',') : Object.keys(workloads);
const kinds = opts.only ? opts.only.split(',') : Object.keys(KINDS);
const rows = [];
const limit = Math.max(60_000, COUNT * 2); // ms per run: at least 500 msg/s
for (const name of names) {
  if (!workloads[name]) throw new Error(`unknown workload ${name}: one of ${Object.keys(workloads)}`);
  for (const kind of kinds) {
    if (!KINDS[kind]) throw new Error(`unknown client ${kind}: one of ${Object.keys(KINDS)}`);
    if (KINDS[kind].publishes && !PUBLISHING.has(name)) continue;
    const runs = [];
    for (let i = 0; i < RUNS; i++) runs.push(await bounded(KINDS[kind].run(workloads[name], opts.addr), limit, `${name} ${kind}`));
    const row = {
      workload: name,
      client: KINDS[kind].label,
      count: COUNT,
      runs: runs.length,
      msgPerSec: median(runs.map((r) => r.msgPerSec)),
      p50Ms: median(runs.map((r) => r.p50)),
      p99Ms: median(runs.map((r) => r.p99)),
      cpuUsPerMsg: median(runs.map((r) => r.cpuUsPerMsg)),
      procUsPerMsg: PIDS.map((_, j) => median(runs.map((r) => r.procUsPerMsg[j]))),
      each: runs,
    };
    rows.push(row);
    const latency = row.p50Ms !== undefined ? `, p50 ${fmt(row.p50Ms, 3)} ms, p99 ${fmt(row.p99Ms, 3)} ms` : '';
    console.error(`bench: ${name} ${kind}: ${fmt(row.msgPerSec)} msg/s${latency} (each run: ${runs.map((r) => fmt(r.msgPerSec)).join(', ')})`);
  }
}

const header = ['workload', 'client', 'msg/s', 'p50 ms', 'p99 ms', 'client CPU µs/msg'];
PIDS.forEach((pid, i) => header.push(`${['redq', 'redis', 'pid'][Math.min(i, 2)]} ${pid} CPU µs/msg`));
const lines = [
  `${COUNT.toLocaleString('en-US')} messages of 100 bytes per run, median of ${RUNS} run(s)`,
  '',
  `| ${header.join(' | ')} |`,
  `|${header.map(() => '---').join('|')}|`,
];
for (const r of rows) {
  const cells = [r.workload, r.client, fmt(r.msgPerSec), fmt(r.p50Ms, 3), fmt(r.p99Ms, 3), fmt(r.cpuUsPerMsg, 1), ...r.procUsPerMsg.map((x) => fmt(x, 1))];
  lines.push(`| ${cells.join(' | ')} |`);
}
console.log(lines.join('\n'));
if (opts.json) writeFileSync(opts.json, JSON.stringify({ addr: opts.addr, count: COUNT, runs: RUNS, pids: PIDS, rows }, null, 2));
process.exit(0);
