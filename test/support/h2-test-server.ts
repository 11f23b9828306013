// tollgate's gRPC server in the test process, on a free loopback port, with methods made for
// protocol tests: Echo (the request back), Probe (a header's value back), Hold (answers when told,
// counting as a store's call would the calls whose caller left them), and the RPC observer's
// counts, so a test sees every call started and finished.
import type { AddressInfo } from "node:net";
import type { GrpcMethod, ServerStream } from "../../src/frontends/envoy-grpc/grpc-protocol.js";
import { createGrpcServer } from "../../src/frontends/envoy-grpc/grpc-server.js";

export type TestServer = {
  port: number;
  finished: string[];
  started: number;
  /** Resolves every Hold call waiting. */
  release(): void;
  held(): number;
  /** Hold calls left by their caller before their answer (past their deadline, or reset). */
  left(): number;
  /** The Watch calls open (a server-streaming method that writes its request back twice a second). */
  watches: Set<ServerStream>;
  close(): Promise<void>;
  drain(): Promise<void>;
  errors: unknown[];
};

export async function startTestServer(
  options: { tls?: { cert: Buffer; key: Buffer }; maxMessageBytes?: number; maxServerStreams?: number } = {},
): Promise<TestServer> {
  const waiting: (() => void)[] = [];
  const finished: string[] = [];
  const errors: unknown[] = [];
  const watches = new Set<ServerStream>();
  let started = 0;
  let left = 0;
  const methods = new Map<string, GrpcMethod>([
    ["/t.T/Echo", { kind: "unary", handle: (request) => request }],
    [
      "/t.T/Probe",
      { kind: "unary", handle: (_request, call) => Buffer.from(call.headers?.["x-probe"] ?? "", "latin1") },
    ],
    [
      "/t.T/Hold",
      {
        kind: "unary",
        handle(request, call) {
          // As a method that counts on the store leaves its withdrawal with its caller.
          call.withdrawal = {
            refuse: () => {
              left += 1;
            },
          };
          return new Promise<Uint8Array>((resolve) => waiting.push(() => resolve(request)));
        },
      },
    ],
    [
      "/t.T/Watch",
      {
        kind: "server-stream",
        handle(request, call) {
          watches.add(call);
          call.write(request);
          const timer = setInterval(() => call.write(request), 200);
          call.onClose(() => {
            clearInterval(timer);
            watches.delete(call);
          });
        },
      },
    ],
  ]);
  const { server, close, destroy } = createGrpcServer({
    methods,
    tls: options.tls,
    maxMessageBytes: options.maxMessageBytes,
    maxServerStreams: options.maxServerStreams,
    observer: {
      started: () => {
        started += 1;
      },
      finished: (_method, status) => finished.push(status),
    },
    onError: (error) => errors.push(error),
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    finished,
    get started() {
      return started;
    },
    release: () => {
      for (const resolve of waiting.splice(0)) resolve();
    },
    held: () => waiting.length,
    left: () => left,
    watches,
    errors,
    drain: () => close(),
    close: async () => {
      const done = close();
      destroy();
      await done;
    },
  };
}
