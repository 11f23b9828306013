// The gRPC rows: Envoy's ext_authz Check against tollgate's gRPC listener, and the gRPC ceiling (an
// empty unary method on tollgate's own gRPC server stack, bench/grpc-ceiling-server.mjs): their
// request bodies, the server, and one call of the bench's own that checks a row's answer before every
// slice. The load itself is h2load's (h2load.mjs).
import { readFileSync, writeFileSync } from "node:fs";
import * as http2 from "node:http2";
import { join } from "node:path";
import { messages } from "../../dist/src/frontends/envoy-grpc/protos.js";
import { freePort, waitFor } from "../../test/support/local.mjs";
import { ROOT, startProcess } from "../../test/support/processes.mjs";

export const CHECK_METHOD = "/envoy.service.auth.v3.Authorization/Check";
export const GRPC_CEILING_METHOD = "/tollgate.bench.Ceiling/Empty";

/** google.rpc.Code names of the statuses the rows expect. */
const CODE_NAMES = { 0: "OK", 8: "RESOURCE_EXHAUSTED", 16: "UNAUTHENTICATED", 14: "UNAVAILABLE" };
const codeName = (code) => CODE_NAMES[code] ?? String(code);

/** A message with gRPC's 5-byte prefix (not compressed, big-endian length). */
function framed(message) {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

/**
 * The CheckRequest Envoy sends for `GET {path}` with `headers` from a client at 127.0.0.1 (the address
 * the HTTP rows' checks come from): Envoy's own pseudo-headers and request id beside the request's.
 */
export function checkRequestBytes({ method = "GET", path, headers = {} }) {
  const host = "shop.example.com";
  const message = messages.CheckRequest.fromObject({
    attributes: {
      source: { address: { socket_address: { address: "127.0.0.1", port_value: 40000 } } },
      destination: { address: { socket_address: { address: "127.0.0.1", port_value: 10000 } } },
      request: {
        http: {
          id: "12480533913394826539",
          method,
          path,
          host,
          scheme: "http",
          protocol: "HTTP/1.1",
          headers: {
            ":authority": host,
            ":method": method,
            ":path": path,
            ":scheme": "http",
            "user-agent": "bench/1.0",
            "x-forwarded-proto": "http",
            "x-request-id": "2f4a6c1e-9b3d-4e7a-8c5f-1d2e3f4a5b6c",
            ...headers,
          },
        },
      },
    },
  });
  return messages.CheckRequest.encode(message).finish();
}

/**
 * One unary call over a connection of its own: the HTTP status, the grpc-status and grpc-message
 * (trailers, or headers of a Trailers-Only answer) and the answer's message bytes.
 */
export function grpcCall(url, path, body, timeoutMs = 5_000) {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url);
    const timer = setTimeout(() => {
      session.destroy();
      reject(new Error(`no answer from ${url}${path} within ${timeoutMs} ms`));
    }, timeoutMs);
    const done = (error, value) => {
      clearTimeout(timer);
      session.close();
      if (error === undefined) resolve(value);
      else reject(error);
    };
    session.on("error", (error) => done(error));
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
    });
    let head = {};
    let trailers = {};
    const chunks = [];
    stream.on("response", (headers) => {
      head = headers;
    });
    stream.on("trailers", (headers) => {
      trailers = headers;
    });
    stream.on("data", (chunk) => chunks.push(chunk));
    stream.on("error", (error) => done(error));
    stream.on("end", () => {
      const data = Buffer.concat(chunks);
      const grpcStatus = trailers["grpc-status"] ?? head["grpc-status"];
      const grpcMessage = trailers["grpc-message"] ?? head["grpc-message"];
      done(undefined, {
        httpStatus: head[":status"],
        grpcStatus: grpcStatus === undefined ? undefined : Number(grpcStatus),
        grpcMessage: grpcMessage === undefined ? "" : decodeURIComponent(String(grpcMessage)),
        message: data.length >= 5 ? data.subarray(5, 5 + data.readUInt32BE(1)) : undefined,
      });
    });
    stream.end(body);
  });
}

/**
 * One call of a gRPC row, which must be answered as the row expects: a Check's CheckResponse with
 * status `expectCode`, the ceiling's empty message. Throws with what came back otherwise.
 */
export async function verifyGrpcRow(spec) {
  const target = new URL(spec.url);
  const answer = await grpcCall(target.origin, target.pathname, readFileSync(spec.grpc.bodyFile));
  const what = `HTTP ${answer.httpStatus}, grpc-status ${answer.grpcStatus} ${answer.grpcMessage}`.trim();
  if (answer.httpStatus !== 200 || answer.grpcStatus !== 0 || answer.message === undefined) {
    throw new Error(`preflight of "${spec.label}": the call failed (${what})`);
  }
  if (spec.grpc.expectCode === undefined) {
    if (answer.message.length !== 0) throw new Error(`preflight of "${spec.label}": a non-empty answer`);
    return { bytes: answer.message.length };
  }
  const response = messages.CheckResponse.decode(answer.message);
  const code = response.status?.code ?? 0;
  if (code !== spec.grpc.expectCode) {
    throw new Error(
      `preflight of "${spec.label}": CheckResponse status ${codeName(code)}, expected ${codeName(spec.grpc.expectCode)} ` +
        `(${response.status?.message ?? ""})`,
    );
  }
  return { bytes: answer.message.length, code };
}

/** The request body of a row in `dir`: a framed message, written once. */
export function writeBody(dir, name, message) {
  const file = join(dir, `grpc-${name}.bin`);
  writeFileSync(file, framed(message));
  return file;
}

/** bench/grpc-ceiling-server.mjs on a free port, up once a call of its method is answered. */
export async function startGrpcCeiling(name = "grpc ceiling") {
  const port = await freePort();
  const proc = startProcess({
    name,
    command: process.execPath,
    args: [join(ROOT, "bench", "grpc-ceiling-server.mjs")],
    env: { HOST: "127.0.0.1", PORT: String(port) },
  });
  const url = `http://127.0.0.1:${port}`;
  const answers = async () => {
    try {
      return (await grpcCall(url, GRPC_CEILING_METHOD, framed(new Uint8Array(0)), 1_000)).grpcStatus === 0;
    } catch {
      return false;
    }
  };
  await waitFor(answers, 10_000, `grpc ceiling on ${port}`, proc);
  return { ...proc, port, url };
}
