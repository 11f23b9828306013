// The bench's OTLP receiver for the tracing-on row, run by bench/run.mjs as its own process: it takes
// every POST (an OTLP/HTTP export, protobuf or JSON) and answers 200 with an empty
// ExportTraceServiceResponse, as a collector that keeps up would. Env: PORT, HOST.
// GET /count: exports received and their bytes, as JSON.
import { createServer } from "node:http";

const port = Number(process.env.PORT);
const host = process.env.HOST ?? "127.0.0.1";
let exports = 0;
let bytes = 0;

createServer((req, res) => {
  if (req.method === "GET") {
    const body = JSON.stringify({ exports, bytes });
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
    return;
  }
  req.on("data", (chunk) => {
    bytes += chunk.length;
  });
  req.on("end", () => {
    exports += 1;
    const json = String(req.headers["content-type"] ?? "").includes("json");
    res.writeHead(200, { "content-type": json ? "application/json" : "application/x-protobuf" });
    res.end(json ? "{}" : "");
  });
}).listen(port, host);
