// AdminClient: the AdminService with a promise-returning method per RPC.
// Requests are checked against their proto message before they are sent: an
// unknown field fails (proto-loader would drop it), and durations may be
// given in milliseconds and timestamps as Dates, as in the rest of the
// library, besides the raw {seconds, nanos}.

import { checkMillis, checkOptions, toDuration, toTimestamp } from './util.js';

const DURATION = 'google.protobuf.Duration';
const TIMESTAMP = 'google.protobuf.Timestamp';
const PROTO_TIME_FIELDS = Object.freeze(['seconds', 'nanos']);

/**
 * The AdminService with a promise-returning method per RPC, named in
 * lowerCamelCase: createTopic, getTopic, listTopics, updateTopic,
 * deleteTopic, createSubscription, getSubscription, listSubscriptions,
 * updateSubscription, deleteSubscription, listDeadLetters,
 * redriveDeadLetters, purgeDeadLetters, seek, putSchedule, getSchedule,
 * listSchedules, deleteSchedule. Requests and responses are the
 * messages of admin.proto in camelCase (proto-loader objects: 64-bit numbers
 * as numbers, enums as their names). In requests, a Duration is a number of
 * ms or {seconds, nanos}, a Timestamp a Date, ms since the epoch or
 * {seconds, nanos}; responses give both as {seconds, nanos}. A request with
 * a field its message does not have rejects with a TypeError.
 */
export class AdminClient {
  constructor(client, definition) {
    this._client = client;
    const service = client.adminStub.constructor.service;
    for (const name of Object.keys(service)) {
      const method = name[0].toLowerCase() + name.slice(1);
      const requestType = service[name].requestType.type;
      this[method] = async (request = {}, timeout) => {
        const converted = convertMessage(definition, 'redq.v1', requestType, request, `${method} request`);
        return client.unary(client.adminStub, name, converted, timeout);
      };
    }
  }
}

// The message named `typeName` (as a field's typeName: relative to the
// package `pkg`, or full).
function resolve(definition, pkg, typeName) {
  const name = typeName.startsWith('.') ? typeName.slice(1) : typeName;
  const entry = definition[`${pkg}.${name}`] ?? definition[name];
  if (entry === undefined) throw new Error(`admin: no message type ${typeName} in the protos`);
  return { fullName: definition[`${pkg}.${name}`] ? `${pkg}.${name}` : name, type: entry.type };
}

/**
 * A copy of `value` (a request, or a message inside one) with its
 * durations and timestamps as {seconds, nanos}, after checking that each
 * field is one of `type`'s (a DescriptorProto of proto-loader).
 */
function convertMessage(definition, pkg, type, value, path) {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError(`${path}: must be an object`);
  const fields = new Map(type.field.map((f) => [f.name, f]));
  checkOptions(value, [...fields.keys()], path, 'field');
  const out = {};
  for (const [key, v] of Object.entries(value)) {
    const field = fields.get(key);
    if (v === undefined || v === null || field.type !== 'TYPE_MESSAGE') {
      out[key] = v;
    } else if (isMap(type, field)) {
      // A map (a schedule's message attributes): an object of strings, as
      // proto-loader takes it.
      if (typeof v !== 'object' || Array.isArray(v)) throw new TypeError(`${path}.${key}: must be an object`);
      out[key] = v;
    } else if (field.label === 'LABEL_REPEATED') {
      if (!Array.isArray(v)) throw new TypeError(`${path}.${key}: must be an array`);
      out[key] = v.map((item, i) => convertField(definition, pkg, field, item, `${path}.${key}[${i}]`));
    } else {
      out[key] = convertField(definition, pkg, field, v, `${path}.${key}`);
    }
  }
  return out;
}

// Whether `field` of `type` is a map: a repeated field of the nested
// message type that protoc generates for it, marked map_entry.
function isMap(type, field) {
  if (field.label !== 'LABEL_REPEATED') return false;
  const entry = field.typeName.split('.').pop();
  return (type.nestedType ?? []).some((nested) => nested.name === entry && nested.options?.mapEntry);
}

function convertField(definition, pkg, field, value, path) {
  const { fullName, type } = resolve(definition, pkg, field.typeName);
  if (fullName === DURATION) {
    if (typeof value === 'number') return toDuration(checkMillis(value, path));
    return protoTime(value, path, 'a number of milliseconds or {seconds, nanos}');
  }
  if (fullName === TIMESTAMP) {
    if (typeof value === 'number' || value instanceof Date) return toTimestamp(value, path);
    return protoTime(value, path, 'a Date, milliseconds since 1970, or {seconds, nanos}');
  }
  if (type.options?.mapEntry) return value; // no map in admin.proto's requests
  const dot = fullName.lastIndexOf('.');
  return convertMessage(definition, fullName.slice(0, dot), type, value, path);
}

function protoTime(value, path, expected) {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError(`${path}: must be ${expected}`);
  return checkOptions(value, PROTO_TIME_FIELDS, path, 'field');
}
