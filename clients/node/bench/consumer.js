// The consumer of the end-to-end benchmark, a process of its own (forked by
// bench.js, talking over the IPC channel): it subscribes with the library or
// the raw stubs, tells the producer once a warm-up message came through,
// then records for each measured message the handler's time on the shared clock minus
// the producer's stamp in its payload, and reports the percentiles and its
// own CPU time.

import { Subscriber } from '../index.js';
import { WARM, cpuNow, quantile, rawStub, unary, sharedClock } from './common.js';

function run({ addr, topic, subscription, count, mode }) {
  const latencies = new Float64Array(count);
  let n = 0;
  let warm = false;
  let cpuStart = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));

  // Called with each payload as it reaches the handler.
  const onPayload = (payload) => {
    const now = sharedClock();
    if (payload[8] === WARM) {
      if (!warm) {
        warm = true;
        process.send({ type: 'warm' });
      }
      return;
    }
    if (n < count) latencies[n++] = now - payload.readDoubleLE(0);
    if (n === count) finish();
  };

  process.on('message', (msg) => {
    if (msg.type === 'start') cpuStart = cpuNow();
  });

  let stop;
  if (mode === 'lib') {
    const subscriber = new Subscriber(addr);
    subscriber.subscribe(topic, subscription, (m) => onPayload(m.payload), { maxOutstanding: 100 });
    stop = () => subscriber.close();
  } else {
    const stub = rawStub(addr);
    const call = stub.Subscribe({ topic, subscription, maxOutstandingMessages: 100 });
    call.on('data', (res) => {
      const ackIds = [];
      for (const received of res.messages) {
        ackIds.push(received.ackId);
        onPayload(received.message.payload);
      }
      unary(stub, 'Ack', { topic, subscription, ackIds }).catch(() => {});
    });
    call.on('error', () => {});
    stop = async () => {
      call.cancel();
      stub.close();
    };
  }

  finished.then(async () => {
    const cpuUs = cpuNow() - cpuStart;
    const sorted = Array.from(latencies).sort((a, b) => a - b);
    process.send({ type: 'done', p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), max: sorted[sorted.length - 1], cpuUs });
    await stop();
    process.disconnect();
  });
}

process.once('message', run);
