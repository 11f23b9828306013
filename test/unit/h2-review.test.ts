// A review of the HPACK decoder's header list: field names are the peer's to choose, so no name may
// reach into the list object's prototype.
import { describe, expect, it } from "vitest";
import { HpackDecoder } from "../../src/frontends/envoy-grpc/h2/hpack.js";

function literal(name: string, value: string): Buffer {
  const n = Buffer.from(name, "latin1");
  const v = Buffer.from(value, "latin1");
  return Buffer.concat([Buffer.from([0, n.length]), n, Buffer.from([v.length]), v]);
}

describe("the decoded header list", () => {
  it.each(["constructor", "toString", "__proto__", "hasOwnProperty", "valueOf"])(
    "keeps a field named %s as sent",
    (name) => {
      const { headers } = new HpackDecoder(4096, 65536).decode(literal(name, "sent"));
      expect(Object.getOwnPropertyDescriptor(headers, name)?.value).toBe("sent");
    },
  );

  it("does not answer a lookup of a name the peer never sent with something inherited", () => {
    const { headers } = new HpackDecoder(4096, 65536).decode(literal("x-request-id", "r1"));
    expect(headers.constructor).toBeUndefined();
  });
});
