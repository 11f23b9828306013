// The README's walk-through against a real tollgate: what it says the requests print is what they answer.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryStore } from "../../src/store/store.js";
import { type InProcess, startInProcess } from "../support/in-process.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

const README = readFileSync(fileURLToPath(new URL("../../README.md", import.meta.url)), "utf8");

/** The walk-through's printed output: the code block after "What it prints". */
function printed(): string[] {
  const from = README.indexOf("\nWhat it prints");
  if (from < 0) throw new Error('README has no "What it prints"');
  const block = /```\n([\s\S]*?)```/.exec(README.slice(from));
  return (block?.[1] ?? "").split("\n");
}

/** Times vary from run to run: every `reset` becomes 0, so that only the shape and counts compare. */
const withoutTimes = (value: unknown): unknown =>
  JSON.parse(JSON.stringify(value), (key, v: unknown) => (key === "reset" ? 0 : v));

describe("the README walk-through", () => {
  let t: InProcess;
  beforeAll(async () => {
    t = await startInProcess({ store: createMemoryStore(), env: { LOG_LEVEL: "silent" } });
  });
  afterAll(async () => {
    await t.close();
    await t.store.close();
  });

  it("prints the limits JSON that GET /admin/users/{id}/limits answers after its checks", async () => {
    const line = printed().find((l) => l.startsWith('{"user_id":"demo-alice","tier":"free","limits"'));
    expect(line, "the walk-through prints alice's limits").toBeDefined();
    // The walk-through's checks: one products request, then 21 searches (the last one refused).
    const { access_token: token } = await t.loginOk("alice", "secret");
    expect(await t.check(token, "/api/products")).toMatchObject({ kind: "allow" });
    for (let i = 0; i < 20; i += 1)
      expect(await t.check(token, "/api/search")).toMatchObject({ kind: "allow" });
    expect(await t.check(token, "/api/search")).toMatchObject({ kind: "deny", status: 429 });
    const limits = await t.admin("GET", "/admin/users/demo-alice/limits", { token: ADMIN_TOKEN });
    expect(limits.status).toBe(200);
    expect(withoutTimes(JSON.parse(line as string))).toEqual(withoutTimes(limits.body));
  });
});
