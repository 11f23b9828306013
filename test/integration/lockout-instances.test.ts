// The per-username lockout across tollgate instances on one Redis: LOGIN_LOCKOUT bounds the password
// checks of one name in total, however many instances the concurrent guesses are spread over.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";

const LOCKOUT = 10;
const PASSWORD = "a long password";

let a: InProcessOnRedis;
let b: InProcessOnRedis;

beforeAll(async () => {
  a = await startInProcess({ demoUsers: false });
  b = await startInProcess({ peerOf: a });
});
afterAll(async () => {
  await b?.close();
  await a?.close();
});

const login = async (on: InProcessOnRedis, username: string, password: string): Promise<number> => {
  const reply = await fetch(`${on.publicUrl}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  await reply.arrayBuffer();
  return reply.status;
};

const createUser = async (username: string): Promise<void> => {
  const reply = await fetch(`${a.adminUrl}/admin/users`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${a.adminToken}` },
    body: JSON.stringify({ username, password: PASSWORD, tier: "free" }),
  });
  expect(reply.status).toBe(201);
};

describe("the login lockout on two instances sharing one Redis", () => {
  it("checks at most LOGIN_LOCKOUT wrong passwords of one name in total, and answers the rest 429", async () => {
    // Several names at once, each guessed concurrently through both instances: an overshoot on any
    // one of them (two instances both seeing one failure left) is a failure of the lockout.
    const names = Array.from(
      { length: 4 },
      (_, i) => `split_${i}_${Math.random().toString(36).slice(2, 10)}`,
    );
    for (const name of names) await createUser(name);
    const guesses = names.flatMap((name) =>
      Array.from({ length: 30 }, (_, i) => ({ name, on: i % 2 === 0 ? a : b, password: `wrong-${i}` })),
    );
    const codes = await Promise.all(guesses.map((g) => login(g.on, g.name, g.password)));
    for (const name of names) {
      const own = codes.filter((_, i) => guesses[i]?.name === name);
      expect(
        own.filter((c) => c === 401),
        name,
      ).toHaveLength(LOCKOUT);
      expect(
        own.filter((c) => c === 429),
        name,
      ).toHaveLength(30 - LOCKOUT);
      expect(await login(b, name, PASSWORD), name).toBe(429);
    }
  });

  it("lets a user log in any number of times: a right password never counts toward the lockout", async () => {
    const name = `often_${Math.random().toString(36).slice(2, 10)}`;
    await createUser(name);
    const codes = await Promise.all(
      Array.from({ length: 2 * LOCKOUT }, (_, i) => login(i % 2 === 0 ? a : b, name, PASSWORD)),
    );
    expect(codes).toEqual(Array(2 * LOCKOUT).fill(200));
    expect(await login(a, name, PASSWORD)).toBe(200);
  });
});
