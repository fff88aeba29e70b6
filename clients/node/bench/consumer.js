// The consumer of the end-to-end benchmark, a process of its own (forked by
// bench.js, talking over the IPC channel): it subscribes with the library or
// the raw stubs, tells the producer once a warm-up message came through,
// then records for each measured message the handler's time on the shared clock minus
// the producer's stamp in its payload, and reports the percentiles and its
// own CPU time.

import { Subscriber } from '../index.js';
import { latencyRecorder, rawStub, unary } from './common.js';

function run({ addr, topic, subscription, count, mode, subscribeOptions }) {
  const { onPayload, report } = latencyRecorder(count);

  let stop;
  if (mode === 'lib') {
    const subscriber = new Subscriber(addr);
    subscriber.subscribe(topic, subscription, (m) => onPayload(m.payload), subscribeOptions);
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

  report.then(async () => {
    await stop();
    process.disconnect();
  });
}

process.once('message', run);
