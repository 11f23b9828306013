// The request's credential reader: API keys read once per key, and nothing a client pads a key with
// (or sends in its place) kept.

import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { newApiKey } from "../../src/auth/api-keys.js";
import { createCredentialReader } from "../../src/auth/credentials.js";
import { createTokenService } from "../../src/auth/jwt.js";

const reader = createCredentialReader({
  tokens: createTokenService({
    algorithms: ["HS256"],
    secret: "x".repeat(40),
    secretGenerated: false,
    privateKey: undefined,
    publicKey: undefined,
    issuer: "tollgate",
    audience: undefined,
    ttlSeconds: 900,
  }),
  provider: undefined,
});

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const heapMb = () => {
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
};

describe("API keys in the credential reader", () => {
  it("reads a key sent with spaces around it, and refuses text that is not shaped like a key", () => {
    const { id, key, hash } = newApiKey();
    const read = reader(undefined, `  ${key} `);
    expect(read).toMatchObject({ ok: true, claims: { sub: `key:${id}`, external: { kind: "key", hash } } });
    expect(reader(undefined, `${key}x`)).toMatchObject({ ok: false, reason: "invalid" });
    expect(reader(`ApiKey ${"a".repeat(63)}`, undefined)).toMatchObject({ ok: false, reason: "invalid" });
  });

  it("keeps nothing of 5,000 keys padded with 60 KB of spaces each (before: the whole text, 600 MB for 10,000)", () => {
    const { key } = newApiKey();
    const before = heapMb();
    for (let i = 0; i < 5_000; i += 1) {
      const padding = " ".repeat(60_000 + i);
      expect(reader(`ApiKey ${padding}${key}`, undefined)).toMatchObject({ ok: true });
    }
    expect(heapMb() - before).toBeLessThan(50);
  });
});
