// The gRPC ceiling that tollgate's gRPC Check is compared with, run by bench/run.mjs as its own
// process: tollgate's own gRPC server stack (createGrpcServer from dist/, on tollgate's own HTTP/2
// with its framing, trailers and status handling) with one unary method that reads the request and
// answers an empty message, so that a row against it costs everything a Check costs except the check
// itself.
// Env: PORT, HOST. The method: /tollgate.bench.Ceiling/Empty (GRPC_CEILING_METHOD in bench/lib/grpc.mjs).
import { createGrpcServer } from "../dist/src/frontends/envoy-grpc/grpc-server.js";

const port = Number(process.env.PORT);
const host = process.env.HOST ?? "127.0.0.1";
const EMPTY = new Uint8Array(0);

const { server, destroy } = createGrpcServer({
  methods: new Map([["/tollgate.bench.Ceiling/Empty", { kind: "unary", handle: () => EMPTY }]]),
  onError: (error, method) => process.stderr.write(`grpc ceiling: ${method}: ${String(error)}\n`),
});
server.listen(port, host);

const stop = () => {
  server.close();
  destroy();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
