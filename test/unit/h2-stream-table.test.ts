// The HTTP/2 connection's table of open streams (src/frontends/envoy-grpc/h2/stream-table.ts)
// against a Map: any sequence of opens and closes leaves both holding the same streams, through
// growth and the backward shift of deletion.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { H2Stream } from "../../src/frontends/envoy-grpc/h2/state.js";
import { StreamTable } from "../../src/frontends/envoy-grpc/h2/stream-table.js";

const stream = (id: number) => ({ id }) as H2Stream;

describe("StreamTable", () => {
  it("holds what a Map holds, whatever streams open and close", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 400 })), { maxLength: 600 }),
        (ops) => {
          const table = new StreamTable<H2Stream>();
          const model = new Map<number, H2Stream>();
          for (const [open, n] of ops) {
            // Client ids are odd; ids that collide in the table's slots come from any spacing.
            const id = n * 2 + 1;
            if (open && !model.has(id)) {
              const s = stream(id);
              table.add(s);
              model.set(id, s);
            } else {
              expect(table.delete(id)).toBe(model.delete(id));
            }
            expect(table.size).toBe(model.size);
          }
          for (let n = 0; n <= 400; n += 1) expect(table.get(n * 2 + 1)).toBe(model.get(n * 2 + 1));
          expect(
            table
              .values()
              .map((s) => s.id)
              .sort((a, b) => a - b),
          ).toEqual([...model.keys()].sort((a, b) => a - b));
        },
      ),
      { numRuns: 300 },
    );
  });

  it("finds streams whose ids share a slot after others of the run are closed", () => {
    const table = new StreamTable<H2Stream>();
    // 64 slots: ids 1, 129 and 257 all start at slot 0; 3 starts at slot 1.
    for (const id of [1, 129, 3, 257]) table.add(stream(id));
    expect(table.delete(129)).toBe(true);
    expect(table.get(257)?.id).toBe(257);
    expect(table.get(3)?.id).toBe(3);
    expect(table.delete(1)).toBe(true);
    expect(table.get(257)?.id).toBe(257);
    expect(table.get(129)).toBeUndefined();
    expect(table.size).toBe(2);
  });
});
