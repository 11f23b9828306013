// A review of tollgate's own HTTP/2 server: the memory a request holds, measured in a process of
// its own (the other suites' leftovers would blur it).
import * as v8 from "node:v8";
import * as vm from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { E, F, frame, grpcHeaders, RawClient, T, u32 } from "../support/h2-raw.js";
import { startTestServer, type TestServer } from "../support/h2-test-server.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
});

afterAll(async () => {
  await server?.close();
});

const HOLD = "/t.T/Hold";

/** Collects garbage twice, with a pause for the freeing of array buffers between. */
async function settle(gc: () => void): Promise<void> {
  gc();
  await new Promise((resolve) => setTimeout(resolve, 50));
  gc();
}

describe("memory a request holds (the per-connection byte budget)", () => {
  it("holds about what a request's DATA payloads count, not the socket reads they arrived in", async () => {
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc") as () => void;
    const client = await RawClient.connect(server.port);
    client.send(frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders(HOLD)));
    await settle(gc);
    const before = process.memoryUsage().arrayBuffers;
    // 20,000 DATA frames of one byte each, each padded (255 bytes) and followed by 60 WINDOW_UPDATEs
    // on the connection (frames that cost nothing against any budget): 21 MB sent for 20 KB of
    // request, in 100 writes.
    const filler = Buffer.concat(Array.from({ length: 60 }, () => frame(T.WINDOW_UPDATE, 0, 0, u32(1))));
    const padded = Buffer.concat([Buffer.from([255, 0]), Buffer.alloc(255)]);
    for (let w = 0; w < 100; w++) {
      const frames: Buffer[] = [];
      for (let i = 0; i < 200; i++) frames.push(frame(T.DATA, F.PADDED, 1, padded), filler);
      client.send(...frames);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    client.send(frame(T.PING, 0, 0, Buffer.from("measured")));
    await client.waitFor((f) => f.type === T.PING && f.payload.toString() === "measured");
    await settle(gc);
    const held = process.memoryUsage().arrayBuffers - before;
    client.send(frame(T.RST_STREAM, 0, 1, u32(E.CANCEL)));
    client.close();
    // The budget counts 20,000 bytes; 21 MB sent; allow 8 MB for everything else (garbage the
    // collector has not yet handed back).
    expect(held).toBeLessThan(8_000_000);
  });
});
