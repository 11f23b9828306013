// A flood of logins sent straight to PORT (past the proxy's per-address login limit) is held to
// MAX_PENDING_LOGINS at once: the rest get 503 at once, counted toward no lockout, and the process
// still logs its users in once the flood is over.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_PENDING_LOGINS } from "../../src/auth/auth-service.js";
import { closeClient, send } from "../support/http-client.mjs";
import { type InProcessOnRedis, startInProcess, uniqueName } from "../support/in-process.js";

let tollgate: InProcessOnRedis;

beforeAll(async () => {
  tollgate = await startInProcess({ demoUsers: false });
});

afterAll(async () => {
  await tollgate?.close();
  closeClient();
});

const attempt = (username: string, password: string) =>
  send(`${tollgate.publicUrl}/auth/login`, { method: "POST", body: { username, password } });

describe("a login flood", () => {
  it("answers past MAX_PENDING_LOGINS 503 with Retry-After at once, never counted toward a lockout", async () => {
    const user = await tollgate.newUser();
    // Twice the bound, all at once: each waits on a scrypt derivation of tens of ms on four threads.
    const flood = Array.from({ length: MAX_PENDING_LOGINS * 2 }, (_, i) =>
      // One in eight at the real user's name, with wrong passwords: busy answers must not lock it.
      i % 8 === 0 ? attempt(user.username, `wrong-${i}`) : attempt(uniqueName("nobody"), "wrong-password"),
    );
    const replies = await Promise.all(flood);
    const statuses = new Map<number, number>();
    for (const reply of replies) statuses.set(reply.status, (statuses.get(reply.status) ?? 0) + 1);
    const busy = replies.filter((reply) => reply.status === 503);
    // At most the bound went on to a password check (401, or 429 once the real user's name locked).
    for (const status of statuses.keys())
      expect([401, 429, 503], JSON.stringify([...statuses])).toContain(status);
    // Slots free as derivations end, so more than the bound are checked over the whole flood; at
    // its height the rest were turned away.
    expect(busy.length).toBeGreaterThan(0);
    for (const reply of busy) {
      expect(reply.header("retry-after")).toBe("1");
      expect(reply.json<{ error: string }>().error).toBe("unavailable");
    }
    const lines = tollgate.logWrites().filter((line) => line.includes('"event":"login_busy"'));
    expect(lines.length).toBeGreaterThanOrEqual(1);
    // One line a second at most: the flood took far less than busy.length seconds.
    expect(lines.length).toBeLessThan(busy.length);

    // The flood is over: the real user logs in, whatever its name's attempts during it.
    expect(
      (await tollgate.admin("DELETE", `/admin/users/${user.id}/lockout`, { token: tollgate.adminToken }))
        .status,
    ).toBe(204);
    const after = await attempt(user.username, user.password);
    expect(after.status, after.text).toBe(200);
  });

  it("counts a busy answer toward no lockout: the name's LOGIN_LOCKOUT attempts stay whole", async () => {
    const user = await tollgate.newUser();
    // Fill the queue with others' logins; once one was refused busy, the queue is full and drains
    // at four scrypt derivations at a time: the user's name is tried then, all at once.
    const logged = () => tollgate.logWrites().filter((line) => line.includes('"event":"login_busy"')).length;
    const before = logged();
    const fill = Array.from({ length: MAX_PENDING_LOGINS * 2 }, () =>
      attempt(uniqueName("filler"), "wrong-password"),
    );
    while (logged() === before) await new Promise((resolve) => setTimeout(resolve, 2));
    const during = await Promise.all(
      Array.from({ length: 20 }, (_, i) => attempt(user.username, `wrong-${i}`)),
    );
    await Promise.all(fill);
    const refusedBusy = during.filter((reply) => reply.status === 503).length;
    expect(refusedBusy).toBeGreaterThan(10);
    // Attempts that were checked count (at most 20 - refusedBusy < 10); a right password still logs in.
    const after = await attempt(user.username, user.password);
    expect(after.status, after.text).toBe(200);
  });
});
