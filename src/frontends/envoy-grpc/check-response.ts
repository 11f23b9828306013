// The Check call's answer, a CheckResponse, written by hand on the wire format: each field measured
// and written once (see check-request.ts for why, and the tests that hold it to protobufjs).
import { Framed, prefixed } from "./grpc-protocol.js";
import { BYTES, fieldSize, tag, utf8Length, VARINT, varintSize, Writer } from "./wire.js";

/** A CheckResponse's content, as the writer takes it. */
export type CheckAnswer = {
  /** google.rpc.Code; 0 allows. */
  code: number;
  message: string;
  /** HTTP status of a denied_response (ignored on allow). */
  httpStatus: number;
  /** ok_response.headers, or denied_response.headers: name, value pairs, flattened. */
  headers: readonly string[];
  /** ok_response.headers_to_remove. */
  remove: readonly string[];
  /** ok_response.response_headers_to_add: name, value pairs, flattened. */
  clientHeaders: readonly string[];
  body: string;
  /** dynamic_metadata: name, value pairs, flattened (string values). */
  metadata: readonly string[];
};

/** HeaderValue {key = 1, value = 2}: its content's size. */
function headerValueSize(key: number, value: number): number {
  return fieldSize(key) + fieldSize(value);
}

/**
 * HeaderValueOption {header = 1, append = 2 (BoolValue, stated false: present and empty)}: its
 * content's size.
 */
function optionSize(key: number, value: number): number {
  return fieldSize(headerValueSize(key, value)) + 2;
}

/** The UTF-8 byte lengths of a flat list of strings. */
function lengths(list: readonly string[]): number[] {
  const out = new Array<number>(list.length);
  for (let i = 0; i < list.length; i += 1) out[i] = utf8Length(list[i] as string);
  return out;
}

function optionsSize(pairs: readonly string[], sizes: readonly number[]): number {
  let total = 0;
  for (let i = 0; i < pairs.length; i += 2) {
    total += fieldSize(optionSize(sizes[i] as number, sizes[i + 1] as number));
  }
  return total;
}

function writeOptions(w: Writer, field: number, pairs: readonly string[], sizes: readonly number[]): void {
  for (let i = 0; i < pairs.length; i += 2) {
    const k = sizes[i] as number;
    const v = sizes[i + 1] as number;
    w.open(tag(field, BYTES), optionSize(k, v));
    w.open(tag(1, BYTES), headerValueSize(k, v));
    w.string(tag(1, BYTES), pairs[i] as string, k);
    w.string(tag(2, BYTES), pairs[i + 1] as string, v);
    // append = 2: a BoolValue present with its default, false.
    w.byte(tag(2, BYTES));
    w.byte(0);
  }
}

/** Struct.fields = 1 entries {key = 1, value = 2: Value {string_value = 3}}: each entry's content size. */
function metadataEntrySize(key: number, value: number): number {
  return fieldSize(key) + fieldSize(fieldSize(value));
}

/**
 * The CheckResponse's bytes (status = 1, denied_response = 2 or ok_response = 3, dynamic_metadata =
 * 4), after gRPC's 5-byte prefix: sent as they are.
 */
export function writeCheckResponse(answer: CheckAnswer): Framed {
  const messageLength = utf8Length(answer.message);
  const statusSize =
    (answer.code === 0 ? 0 : 1 + varintSize(answer.code)) +
    (messageLength === 0 ? 0 : fieldSize(messageLength));
  const headerSizes = lengths(answer.headers);
  const metaSizes = lengths(answer.metadata);
  let metaSize = 0;
  for (let i = 0; i < answer.metadata.length; i += 2) {
    metaSize += fieldSize(metadataEntrySize(metaSizes[i] as number, metaSizes[i + 1] as number));
  }
  let httpSize: number;
  let removeSizes: number[] = [];
  let clientSizes: number[] = [];
  let bodyLength = 0;
  if (answer.code === 0) {
    removeSizes = lengths(answer.remove);
    clientSizes = lengths(answer.clientHeaders);
    httpSize = optionsSize(answer.headers, headerSizes) + optionsSize(answer.clientHeaders, clientSizes);
    for (const size of removeSizes) httpSize += fieldSize(size);
  } else {
    bodyLength = utf8Length(answer.body);
    const status = 1 + varintSize(answer.httpStatus);
    httpSize =
      fieldSize(status) +
      optionsSize(answer.headers, headerSizes) +
      (bodyLength === 0 ? 0 : fieldSize(bodyLength));
  }
  const total = fieldSize(statusSize) + fieldSize(httpSize) + (metaSize === 0 ? 0 : fieldSize(metaSize));
  const w = new Writer(prefixed(total));
  w.at = 5;
  w.open(tag(1, BYTES), statusSize);
  if (answer.code !== 0) {
    w.byte(tag(1, VARINT));
    w.varint(answer.code);
  }
  if (messageLength > 0) w.string(tag(2, BYTES), answer.message, messageLength);
  if (answer.code === 0) {
    w.open(tag(3, BYTES), httpSize);
    writeOptions(w, 2, answer.headers, headerSizes);
    for (let i = 0; i < answer.remove.length; i += 1) {
      w.string(tag(5, BYTES), answer.remove[i] as string, removeSizes[i] as number);
    }
    writeOptions(w, 6, answer.clientHeaders, clientSizes);
  } else {
    w.open(tag(2, BYTES), httpSize);
    w.open(tag(1, BYTES), 1 + varintSize(answer.httpStatus));
    w.byte(tag(1, VARINT));
    w.varint(answer.httpStatus);
    writeOptions(w, 2, answer.headers, headerSizes);
    if (bodyLength > 0) w.string(tag(3, BYTES), answer.body, bodyLength);
  }
  if (metaSize > 0) {
    w.open(tag(4, BYTES), metaSize);
    for (let i = 0; i < answer.metadata.length; i += 2) {
      const k = metaSizes[i] as number;
      const v = metaSizes[i + 1] as number;
      w.open(tag(1, BYTES), metadataEntrySize(k, v));
      w.string(tag(1, BYTES), answer.metadata[i] as string, k);
      w.open(tag(2, BYTES), fieldSize(v));
      w.string(tag(3, BYTES), answer.metadata[i + 1] as string, v);
    }
  }
  if (w.at !== 5 + total) throw new Error(`CheckResponse written ${w.at - 5} of ${total} bytes`);
  return new Framed(w.buf);
}
