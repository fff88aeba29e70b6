// Client against a live redq: schedule / reschedule / cancel, the admin
// client (durations in ms and timestamps as Dates), and errors carrying the
// gRPC code.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, Publisher, Subscriber, RedqError, status } from '../index.js';
import { serverAddress, unique, waitFor } from '../test-support/helpers.js';

let client;
before(async () => {
  client = connect(await serverAddress());
  await client.waitForReady(10_000);
});
after(() => client.close());

test('schedule, reschedule and cancel a message', async () => {
  const topic = unique('node-sched');
  const inAMinute = Date.now() + 60_000;
  const scheduled = await client.schedule(topic, Buffer.from('later'), { delay: 60_000, attributes: { k: 'v' } });
  assert.match(scheduled.id, /\S/);
  assert.equal(scheduled.duplicate, false);
  assert.ok(Math.abs(scheduled.deliverAt.getTime() - inAMinute) < 5_000, `due ${scheduled.deliverAt.toISOString()}`);

  const at = new Date(Date.now() + 3_600_000);
  const moved = await client.reschedule(topic, scheduled.id, { deliverAt: at });
  assert.equal(moved.rescheduled, true);
  assert.equal(moved.deliverAt.getTime(), at.getTime());

  const topicInfo = await client.admin.getTopic({ name: topic });
  assert.equal(topicInfo.stats.scheduledCount, 1);

  assert.equal(await client.cancel(topic, scheduled.id), true);
  assert.equal(await client.cancel(topic, scheduled.id), false, 'already cancelled');
  assert.deepEqual(await client.reschedule(topic, scheduled.id, { delay: 1000 }), { rescheduled: false, deliverAt: null });
});

test('schedule with the same dedupe id is a duplicate', async () => {
  const topic = unique('node-sched-dedupe');
  const first = await client.schedule(topic, Buffer.from('once'), { delay: 60_000, dedupeId: 'job-1' });
  const again = await client.schedule(topic, Buffer.from('once'), { delay: 60_000, dedupeId: 'job-1' });
  assert.equal(again.duplicate, true);
  assert.equal(again.id, first.id);
});

test('schedule checks its arguments', async () => {
  await assert.rejects(client.schedule('t', Buffer.from('x'), {}), /give delay or deliverAt/);
  await assert.rejects(client.schedule('t', Buffer.from('x'), { delay: 1, deliverAt: new Date() }), /not both/);
  await assert.rejects(client.schedule('t', Buffer.from('x'), { delay: -1 }), /not negative/);
  await assert.rejects(client.schedule('t', 42, { delay: 1 }), /payload/);
  await assert.rejects(client.schedule('t', Buffer.from('x'), { delay: 1, dealy: 2 }), /schedule options: unknown option 'dealy'/);
});

test('admin: durations in ms and timestamps as Dates or ms, besides {seconds, nanos}', async () => {
  const topic = unique('node-admin-units');
  const created = await client.admin.createTopic({ name: topic, settings: { retentionMaxAge: 3_600_000, dedupeWindow: 90_500 } });
  assert.deepEqual(created.settings.retentionMaxAge, { seconds: 3600, nanos: 0 });
  assert.deepEqual(created.settings.dedupeWindow, { seconds: 90, nanos: 500_000_000 });
  await client.admin.createSubscription({
    topic,
    name: 'units',
    settings: { ackDeadline: 5_000, retryPolicy: { minimumBackoff: 250, maximumBackoff: { seconds: 20, nanos: 0 } } },
  });
  const info = await client.admin.getSubscription({ topic, name: 'units' });
  assert.deepEqual(info.settings.ackDeadline, { seconds: 5, nanos: 0 });
  assert.deepEqual(info.settings.retryPolicy.minimumBackoff, { seconds: 0, nanos: 250_000_000 });
  assert.deepEqual(info.settings.retryPolicy.maximumBackoff, { seconds: 20, nanos: 0 });
  await client.admin.updateSubscription({ topic, name: 'units', settings: { ackDeadline: 7_000 } });
  assert.deepEqual((await client.admin.getSubscription({ topic, name: 'units' })).settings.ackDeadline, { seconds: 7, nanos: 0 });

  // Seek to a Date: what was published before it is skipped.
  const publisher = new Publisher(client);
  await publisher.publish(topic, Buffer.from('before'));
  await sleep(20);
  const at = new Date();
  await sleep(20);
  await publisher.publish(topic, Buffer.from('after'));
  await publisher.close();
  await client.admin.seek({ topic, subscription: 'units', time: at });
  const got = [];
  const subscriber = new Subscriber(client);
  subscriber.subscribe(topic, 'units', (m) => {
    got.push(m.payload.toString());
  });
  await waitFor(() => got.length >= 1, 10_000, 'the message after the seek time');
  await subscriber.close();
  assert.deepEqual(got, ['after']);
  await client.admin.seek({ topic, subscription: 'units', time: at.getTime() }); // ms since 1970 too

  await assert.rejects(client.admin.createSubscription({ topic, name: 'x', settings: { ackDeadline: '5s' } }), (err) => {
    assert.ok(err instanceof TypeError);
    assert.match(err.message, /^createSubscription request\.settings\.ackDeadline: must be a number of milliseconds or \{seconds, nanos\}/);
    return true;
  });
  await assert.rejects(client.admin.seek({ topic, subscription: 'units', time: 'yesterday' }), /time: must be a Date, milliseconds since 1970/);
  await assert.rejects(client.admin.createSubscription({ topic, name: 'x', settings: { ackDeadline: -1 } }), /not negative/);
});

test('admin: create, list and delete a topic and a subscription', async () => {
  const name = unique('node-admin');
  const created = await client.admin.createTopic({ name, settings: { dedupeWindow: { seconds: 60, nanos: 0 } } });
  assert.equal(created.name, name);
  assert.deepEqual(created.settings.dedupeWindow, { seconds: 60, nanos: 0 });
  const sub = await client.admin.createSubscription({ topic: name, name: 'billing', settings: { start: 'START_POSITION_LATEST' } });
  assert.equal(sub.name, 'billing');
  const { subscriptions } = await client.admin.listSubscriptions({ topic: name });
  assert.deepEqual(subscriptions.map((s) => s.name), ['billing']);
  await client.admin.deleteTopic({ name });
  const err = await client.admin.getTopic({ name }).catch((e) => e);
  assert.ok(err instanceof RedqError);
  assert.equal(err.code, status.NOT_FOUND);
});

test('admin: recurring schedules are put, run, listed and deleted', async () => {
  const topic = unique('node-schedules');
  const tick = await client.admin.putSchedule({
    schedule: { topic, name: 'tick', every: 1_000, message: { payload: Buffer.from('tick'), attributes: { a: 'b' } } },
  });
  assert.deepEqual(tick.every, { seconds: 1, nanos: 0 });
  assert.ok(tick.nextRun, 'a next run');
  const nightly = await client.admin.putSchedule({
    schedule: { topic, name: 'nightly', cron: '0 2 * * *', timeZone: 'Europe/Paris', paused: true, message: { payload: Buffer.from('run') } },
  });
  assert.equal(nightly.nextRun, null);
  await waitFor(async () => (await client.admin.getSchedule({ topic, name: 'tick' })).runs >= 1, 'a run of tick');
  const first = await client.admin.listSchedules({ topic, pageSize: 1 });
  assert.deepEqual([first.schedules.map((s) => s.name), first.nextPageToken], [['nightly'], 'nightly']);
  const last = await client.admin.listSchedules({ topic, pageToken: first.nextPageToken });
  assert.deepEqual([last.schedules.map((s) => s.name), last.nextPageToken], [['tick'], '']);
  await client.admin.deleteSchedule({ topic, name: 'tick' });
  const err = await client.admin.getSchedule({ topic, name: 'tick' }).catch((e) => e);
  assert.equal(err.code, status.NOT_FOUND);
  const bad = await client.admin.putSchedule({ schedule: { topic, name: 'bad', cron: '61 * * * *', message: { payload: Buffer.from('x') } } }).catch((e) => e);
  assert.equal(bad.code, status.INVALID_ARGUMENT);
  assert.match(bad.message, /schedule\.cron: field 1 \(minute\)/);
  await client.admin.deleteTopic({ name: topic });
});

test('errors carry the gRPC code and the server message', async () => {
  const err = await client.schedule('not a topic!', Buffer.from('x'), { delay: 1 }).catch((e) => e);
  assert.ok(err instanceof RedqError);
  assert.equal(err.code, status.INVALID_ARGUMENT);
  assert.equal(err.codeName, 'INVALID_ARGUMENT');
  assert.match(err.details, /^topic: /);
  assert.match(err.message, /^INVALID_ARGUMENT: topic: /);
});
