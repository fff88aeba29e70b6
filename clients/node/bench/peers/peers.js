#!/usr/bin/env node
// The four workloads of ../bench.js against NATS JetStream and RabbitMQ,
// through their ordinary Node clients (`nats`, `amqplib`), so that redq's
// figures can be read against theirs measured in the same run on the same
// machine. Same definitions: a fresh stream or queue per run, 100-byte
// payloads, the e2e consumer in another process, latency = handler invoked −
// just before publish on the shared monotonic clock. What each side promises
// is as close to redq's as their ordinary APIs go: JetStream's file storage
// with publish acks and explicit consumer acks; RabbitMQ's durable queues,
// persistent messages, publisher confirms and manual acks.
//
//   node bench/peers/peers.js [--systems nats,rabbitmq] [--count 100000] [--quick] [--runs 1]
//                             [--workloads a,b] [--json FILE]
//
// The servers' CPU per message comes from the `nats-server` and `beam.smp`
// processes found on this machine, when there is one of each.

import { execFileSync, fork } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { AckPolicy, connect as natsConnect } from 'nats';
import amqp from 'amqplib';
import { cpuNow, fmt, inbox, latencyRecorder, median, procCpu, publishAtRate, warmUp } from '../common.js';

const RATE = 2000; // msg/s of the end-to-end workload
const OUTSTANDING = 50; // single-message publishes in flight
const PREFETCH = 100; // deliveries a consumer holds unacked
const PAYLOAD = Buffer.alloc(100, 0x61);

// ------------------------------------------------------------- the systems

// Each system: connect(), then per run a fresh destination with
// publish(one) → promise, publishBatch(n) → promise (n publishes then all
// their confirmations), consume(onPayload) → stop(), and remove().
const SYSTEMS = {
  nats: {
    process: 'nats-server',
    async connect(url = process.env.NATS_URL ?? '127.0.0.1:4222') {
      const nc = await natsConnect({ servers: url });
      const jsm = await nc.jetstreamManager();
      const js = nc.jetstream();
      return {
        async destination(name) {
          const subject = `${name}.m`;
          // An existing stream of that name is reused (the consumer process names the same one).
          await jsm.streams.add({ name, subjects: [subject] }).catch(() => {});
          return {
            publish: (payload) => js.publish(subject, payload),
            publishBatch: (payloads) => Promise.all(payloads.map((p) => js.publish(subject, p))),
            async consume(onPayload) {
              await jsm.consumers.add(name, { durable_name: 'bench', ack_policy: AckPolicy.Explicit, max_ack_pending: PREFETCH }).catch(() => {});
              const consumer = await js.consumers.get(name, 'bench');
              const messages = await consumer.consume({ max_messages: PREFETCH });
              (async () => {
                for await (const m of messages) {
                  onPayload(m.data);
                  m.ack();
                }
              })();
              return async () => {
                await messages.close();
              };
            },
            remove: () => jsm.streams.delete(name).catch(() => {}),
          };
        },
        close: () => nc.drain(),
      };
    },
  },
  rabbitmq: {
    process: 'beam.smp',
    async connect(url = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672') {
      const conn = await amqp.connect(url);
      const confirms = await conn.createConfirmChannel();
      const sendOne = (queue, payload) =>
        new Promise((resolve, reject) => confirms.sendToQueue(queue, payload, { persistent: true }, (err) => (err ? reject(err) : resolve())));
      return {
        async destination(queue) {
          await confirms.assertQueue(queue, { durable: true });
          return {
            publish: (payload) => sendOne(queue, payload),
            async publishBatch(payloads) {
              for (const p of payloads) confirms.sendToQueue(queue, p, { persistent: true });
              await confirms.waitForConfirms();
            },
            async consume(onPayload) {
              const channel = await conn.createChannel();
              await channel.prefetch(PREFETCH);
              const { consumerTag } = await channel.consume(queue, (m) => {
                onPayload(m.content);
                channel.ack(m);
              });
              return async () => {
                await channel.cancel(consumerTag);
                await channel.close();
              };
            },
            remove: () => confirms.deleteQueue(queue).catch(() => {}),
          };
        },
        close: () => conn.close(),
      };
    },
  },
};

// ------------------------------------------------------------ the consumer

// The e2e consumer, a process of its own, as ../consumer.js (common.js'
// latencyRecorder).
async function consumer({ system, name, count }) {
  const client = await SYSTEMS[system].connect();
  const destination = await client.destination(name);
  const { onPayload, report } = latencyRecorder(count);
  const stop = await destination.consume(onPayload);
  await report;
  await stop();
  await client.close();
  process.disconnect();
}

if (process.argv[2] === '--consumer') {
  process.once('message', (msg) => consumer(msg));
} else {
  await main();
}

// ---------------------------------------------------------------- the runs

async function main() {
  const { values: opts } = parseArgs({
    options: {
      systems: { type: 'string', default: 'nats,rabbitmq' },
      count: { type: 'string', default: '100000' },
      quick: { type: 'boolean', default: false },
      runs: { type: 'string', default: '1' },
      workloads: { type: 'string' },
      json: { type: 'string' },
    },
  });
  const COUNT = opts.quick ? 2000 : Number(opts.count);
  const runId = randomBytes(4).toString('hex');
  let seq = 0;
  const freshName = (workload) => `bench-node-${runId}-${workload}-${seq++}`;

  const measure = async (pid, body) => {
    const before = { cpu: cpuNow(), server: pid ? procCpu(pid) : 0, t: performance.now() };
    const result = await body();
    const seconds = (performance.now() - before.t) / 1000;
    return {
      ...result,
      msgPerSec: COUNT / seconds,
      cpuUsPerMsg: (cpuNow() - before.cpu + (result.otherCpuUs ?? 0)) / COUNT,
      serverUsPerMsg: pid ? (procCpu(pid) - before.server) / COUNT : undefined,
    };
  };

  const workloads = {
    async 'publish-1x50'(client, pid) {
      const d = await client.destination(freshName('pub'));
      await d.publish(PAYLOAD);
      const r = await measure(pid, async () => {
        let sent = 0;
        const worker = async () => {
          while (sent < COUNT) {
            sent++;
            await d.publish(PAYLOAD);
          }
        };
        await Promise.all(Array.from({ length: OUTSTANDING }, worker));
        return {};
      });
      await d.remove();
      return r;
    },
    async 'consume-ack'(client, pid) {
      const d = await client.destination(freshName('consume'));
      const batch = Array.from({ length: 1000 }, () => PAYLOAD);
      for (let sent = 0; sent < COUNT; sent += 1000) await d.publishBatch(batch);
      const r = await measure(pid, async () => {
        let n = 0;
        let done;
        const all = new Promise((resolve) => (done = resolve));
        const stop = await d.consume(() => {
          if (++n === COUNT) done();
        });
        await all;
        await stop();
        return {};
      });
      await d.remove();
      return r;
    },
    async 'e2e-2000'(client, pid, system) {
      const name = freshName('e2e');
      const d = await client.destination(name);
      const child = fork(fileURLToPath(import.meta.url), ['--consumer'], { stdio: 'inherit' });
      const next = inbox(child);
      child.send({ system, name, count: COUNT });
      await warmUp(d.publish, next('warm'));
      child.send({ type: 'start' });
      const done = next('done');
      const r = await measure(pid, async () => {
        await publishAtRate(d.publish, COUNT, RATE);
        const report = await done;
        return { p50: report.p50, p99: report.p99, otherCpuUs: report.cpuUs };
      });
      await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve)));
      await d.remove();
      return r;
    },
    async 'batch-1000'(client, pid) {
      const d = await client.destination(freshName('batch'));
      const batch = Array.from({ length: 1000 }, () => PAYLOAD);
      await d.publish(PAYLOAD);
      const r = await measure(pid, async () => {
        for (let sent = 0; sent < COUNT; sent += 1000) await d.publishBatch(batch);
        return {};
      });
      await d.remove();
      return r;
    },
  };

  const serverPid = (name) => {
    try {
      const pids = execFileSync('pgrep', ['-x', name]).toString().trim().split('\n');
      return pids.length === 1 ? Number(pids[0]) : undefined;
    } catch {
      return undefined; // none running here
    }
  };

  const names = opts.workloads ? opts.workloads.split(',') : Object.keys(workloads);
  const rows = [];
  for (const system of opts.systems.split(',')) {
    if (!SYSTEMS[system]) throw new Error(`unknown system ${system}: one of ${Object.keys(SYSTEMS)}`);
    const pid = serverPid(SYSTEMS[system].process);
    const client = await SYSTEMS[system].connect();
    for (const name of names) {
      if (!workloads[name]) throw new Error(`unknown workload ${name}: one of ${Object.keys(workloads)}`);
      const runs = [];
      for (let i = 0; i < Number(opts.runs); i++) runs.push(await workloads[name](client, pid, system));
      const row = {
        workload: name,
        system,
        count: COUNT,
        msgPerSec: median(runs.map((r) => r.msgPerSec)),
        p50Ms: median(runs.map((r) => r.p50)),
        p99Ms: median(runs.map((r) => r.p99)),
        cpuUsPerMsg: median(runs.map((r) => r.cpuUsPerMsg)),
        serverUsPerMsg: median(runs.map((r) => r.serverUsPerMsg)),
        each: runs,
      };
      rows.push(row);
      console.error(`peers: ${name} ${system}: ${fmt(row.msgPerSec)} msg/s (each run: ${runs.map((r) => fmt(r.msgPerSec)).join(', ')})`);
    }
    await client.close();
  }

  const lines = [
    `${COUNT.toLocaleString('en-US')} messages of 100 bytes per run, median of ${opts.runs} run(s)`,
    '',
    '| workload | system | msg/s | p50 ms | p99 ms | client CPU µs/msg | server CPU µs/msg |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const cells = [r.workload, r.system, fmt(r.msgPerSec), fmt(r.p50Ms, 3), fmt(r.p99Ms, 3), fmt(r.cpuUsPerMsg, 1), fmt(r.serverUsPerMsg, 1)];
    lines.push(`| ${cells.join(' | ')} |`);
  }
  console.log(lines.join('\n'));
  if (opts.json) writeFileSync(opts.json, JSON.stringify({ count: COUNT, runs: Number(opts.runs), rows }, null, 2));
}
