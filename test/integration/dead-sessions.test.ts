// A token whose session is gone is judged as an invalid one: counted by address, refused 401, then 429.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoToken, type InProcess, startInProcess } from "../support/in-process.js";

let t: InProcess;
beforeAll(async () => {
  t = await startInProcess();
});
afterAll(async () => {
  await t?.close();
});

const check = (token: string, ip: string) =>
  t.tollgate.checker({ method: "GET", path: "/api/products", authorization: `Bearer ${token}`, ip });

describe("a token whose session was revoked", () => {
  it("is refused 401 and counted against its address like a bad token, until the address gets 429", async () => {
    const token = await demoToken(t.tollgate.auth, "alice");
    expect(await check(token, "198.51.100.60")).toMatchObject({ kind: "allow" });
    await t.store.sessions.revokeAll("demo-alice");
    const first = await check(token, "198.51.100.61");
    expect(first).toMatchObject({ kind: "deny", status: 401, reason: "revoked", tokenSent: true });
    // The anonymous tier allows an address 100 general requests an hour: the same flood of a dead
    // session's token from one address then gets 429, as garbage tokens do.
    const answers = [];
    for (let i = 0; i < 101; i += 1) answers.push(await check(token, "198.51.100.61"));
    const statuses = answers.map((d) => (d.kind === "deny" ? d.status : 200));
    expect(statuses.slice(0, 100)).toEqual(Array.from({ length: 100 }, () => 401));
    expect(statuses[100]).toBe(429);
    expect(answers[0]).toMatchObject({ reason: "revoked", description: "session expired or revoked" });
    // Another address has its own budget.
    expect(await check(token, "198.51.100.62")).toMatchObject({ status: 401, reason: "revoked" });
  });

  it("leaves a disabled user's session alone: enabled again without a revocation, it serves", async () => {
    const token = await demoToken(t.tollgate.auth, "bob_pro");
    await t.store.users.update("demo-bob", { disabled: true });
    expect(await check(token, "198.51.100.70")).toMatchObject({ status: 401, reason: "inactive" });
    await t.store.users.update("demo-bob", { disabled: false });
    // Enabling the user again (without a revocation) lets the same session through at once.
    expect(await check(token, "198.51.100.70")).toMatchObject({ kind: "allow" });
  });
});
