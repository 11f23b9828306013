// The ceiling of tollgate's HTTP checks, run by bench/run.mjs as its own process: the check
// listener's own HTTP/1.1 server (http1Listener from dist/, its parser, connection handling and
// answer writing) answering every request an empty 200, so that a check row against it costs
// everything a check costs except the check itself. bench/ceiling-server.mjs's "http" mode is the
// same on node:http, which the check listener no longer runs on.
// Env: PORT, HOST.
import { http1Listener } from "../dist/src/frontends/http1/server.js";

const EMPTY = { status: 200, headers: {}, body: "" };

const listener = http1Listener(
  {
    name: "check",
    host: process.env.HOST ?? "127.0.0.1",
    port: Number(process.env.PORT),
    settings: { host: "CHECK_HOST", port: "CHECK_PORT" },
  },
  {
    wantsBody: () => false,
    serve: (exchange) => exchange.respond(EMPTY),
    maxBodyBytes: 0,
    maxHeldBytes: 0,
    onError: (error) => process.stderr.write(`own ceiling: ${String(error)}\n`),
  },
);
await listener.start();

const stop = () => {
  void listener.stop({ force: true }).finally(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
