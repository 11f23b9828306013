// Unknown users, wrong passwords and disabled users cost the same scrypt work and get the same answer.
import type * as crypto from "node:crypto";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { closeClient, send } from "../support/http-client.mjs";
import { type InProcess, startInProcess } from "../support/in-process.js";

type ScryptCall = {
  passwordLength: number;
  saltLength: number;
  keyLength: number;
  options: crypto.ScryptOptions;
};
const calls = vi.hoisted(() => [] as ScryptCall[]);

// Observes (never replaces) scrypt: each call is recorded, then the real derivation runs.
vi.mock("node:crypto", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:crypto")>();
  const scrypt = (...args: unknown[]) => {
    const [password, salt, keyLength, options] = args as [string, Buffer, number, crypto.ScryptOptions];
    calls.push({
      passwordLength: Buffer.byteLength(password),
      saltLength: salt.length,
      keyLength,
      options: { ...options },
    });
    return (actual.scrypt as (...a: unknown[]) => void)(...args);
  };
  return { ...actual, scrypt, default: { ...actual, scrypt } };
});

const PASSWORD = "enumeration-test-password";
let tollgate: InProcess;
let username: string;
let disabledName: string;

async function createUser(name: string): Promise<string> {
  const res = await send(`${tollgate.adminUrl}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${tollgate.adminToken}` },
    body: { username: name, password: PASSWORD, tier: "free" },
  });
  expect(res.status, res.text).toBe(201);
  return res.json<{ user_id: string }>().user_id;
}

beforeAll(async () => {
  tollgate = await startInProcess({ demoUsers: false });
  username = `enum_${Date.now()}`;
  disabledName = `enum_disabled_${Date.now()}`;
  await createUser(username);
  const disabledId = await createUser(disabledName);
  const res = await send(`${tollgate.adminUrl}/admin/users/${disabledId}/disabled`, {
    method: "PUT",
    headers: { authorization: `Bearer ${tollgate.adminToken}` },
    body: { disabled: true },
  });
  expect(res.status).toBe(200);
});

afterAll(async () => {
  await tollgate?.close();
  closeClient();
});

beforeEach(() => {
  calls.length = 0;
});

const attempt = (name: string, password: string) =>
  send(`${tollgate.publicUrl}/auth/login`, { method: "POST", body: { username: name, password } });

describe("login work per attempt", () => {
  it("derives one scrypt key for a successful login (the count this test relies on is real)", async () => {
    expect((await attempt(username, PASSWORD)).status).toBe(200);
    expect(calls).toHaveLength(1);
    expect(calls[0]?.options).toMatchObject({ N: 16384, r: 8, p: 1 });
  });

  it("derives exactly one key with the same parameters for an unknown user, a wrong password and a disabled user", async () => {
    const answers = [];
    const perCase: ScryptCall[][] = [];
    for (const [name, password] of [
      [username, "wrong-password-1"],
      [`nobody_${Date.now()}`, "wrong-password-1"],
      [disabledName, PASSWORD.slice(0, 16)],
    ] as const) {
      calls.length = 0;
      answers.push(await attempt(name, password));
      perCase.push([...calls]);
    }
    for (const [i, reply] of answers.entries()) {
      expect(reply.status, `case ${i}`).toBe(401);
      expect(reply.text).toBe(answers[0]?.text);
      expect(reply.header("www-authenticate")).toBe(answers[0]?.header("www-authenticate"));
    }
    for (const made of perCase) {
      expect(made).toHaveLength(1);
      expect(made[0]).toEqual(perCase[0]?.[0]);
    }
  });

  it("refuses a locked-out username before any scrypt work, known and unknown alike", async () => {
    const ghost = `ghost_${Date.now()}`;
    const locked = `locked_${Date.now()}`;
    await createUser(locked);
    for (const name of [ghost, locked]) {
      for (let i = 0; i < 10; i += 1) expect((await attempt(name, `wrong-${i}`)).status).toBe(401);
    }
    calls.length = 0;
    const [ghostReply, lockedReply] = [await attempt(ghost, "x"), await attempt(locked, PASSWORD)];
    expect(calls).toHaveLength(0);
    expect(ghostReply.status).toBe(429);
    expect(lockedReply.status).toBe(429);
    expect(ghostReply.text).toBe(lockedReply.text);
  });
});
