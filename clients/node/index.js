// redq: the Node.js client library of redq (a gRPC message queue kept in Redis).
// Entry point: re-exports the public API; see README.md.

export { Client, connect, loadProtos, PROTO_DIR, DEFAULT_CHANNEL_OPTIONS } from './lib/client.js';
export { AdminClient } from './lib/admin.js';
export { Publisher } from './lib/publisher.js';
export { Subscriber, Subscription } from './lib/subscriber.js';
export { Message } from './lib/message.js';
export { RedqError } from './lib/errors.js';
export { status } from '@grpc/grpc-js';
