// Upgrading a Redis whose users were stored before canonical usernames: the real process adopts
// their names once, reports names that collide, and keeps deletions that USERS_FILE must respect.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashPassword } from "../../src/auth/passwords.js";
import { startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";

const prefix = testPrefix();
const tag = randomBytes(3).toString("hex");
const hex = (text: string) => Buffer.from(text, "utf8").toString("hex");
const linesWith = (output: string, event: string) =>
  output
    .split("\n")
    .filter((line) => line.includes(`"event":"${event}"`))
    .map((line) => JSON.parse(line) as Record<string, unknown>);

const ann = { id: `ann-${tag}`, username: `Legacy_Ann_${tag}`, password: "legacy password ann" };
// Two users an older tollgate let exist side by side: their names are one once canonical.
const twinUpper = { id: `twin-a-${tag}`, username: `Twin_${tag}`, password: "legacy password twin a" };
const twinLower = { id: `twin-b-${tag}`, username: `twin_${tag}`, password: "legacy password twin b" };
const gone = `Gone_${tag}`;
// Stored by an instance not yet upgraded, after the upgraded one's start-up pass.
const late = { id: `late-${tag}`, username: `Late_Lee_${tag}`, password: "legacy password late" };

let redis: Redis;
let dir: string;
let usersFile: string;
let tollgate: TollgateProcess | undefined;

/** A user as a tollgate before canonical usernames wrote it: the name keyed exactly as typed. */
async function storeAsBefore(user: { id: string; username: string; password: string }): Promise<void> {
  await redis.hset(`${prefix}{u:${user.id}}:user`, {
    id: user.id,
    username: user.username,
    tier: "pro",
    pw: await hashPassword(user.password),
    created: String(Date.now()),
    disabled: "0",
    src: "admin",
  });
  await redis.set(`${prefix}{n:${hex(user.username)}}:uid`, user.id);
  await redis.zadd(`${prefix}{users}:ids`, 0, user.id);
  await redis.set(`${prefix}users:exist`, "1");
}

const start = () =>
  startTollgate(
    { REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: prefix, USERS_FILE: usersFile },
    { readyMs: 20_000 },
  );

async function login(username: string, password: string): Promise<{ status: number; userId?: string }> {
  const res = await fetch(`${tollgate?.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  const body = (await res.json()) as { user_id?: string };
  return { status: res.status, ...(body.user_id === undefined ? {} : { userId: body.user_id }) };
}

beforeAll(async () => {
  redis = connectRedis();
  dir = mkdtempSync(join(tmpdir(), "tollgate-upgrade-"));
  usersFile = join(dir, "users.json");
  // A USERS_FILE user that an admin deleted before the upgrade: marked gone under the name as typed.
  writeFileSync(usersFile, JSON.stringify([{ username: gone, tier: "free", password: "a file password" }]));
  await redis.set(`${prefix}{n:${hex(gone)}}:gone`, `gone-${tag}`);
  for (const user of [ann, twinUpper, twinLower]) await storeAsBefore(user);
});
afterAll(async () => {
  await tollgate?.stop();
  await redis.quit();
  rmSync(dir, { recursive: true, force: true });
});

describe("the first start after canonical usernames", () => {
  it("finds a user stored before by any form of the name", async () => {
    tollgate = await start();
    for (const form of [ann.username, ann.username.toUpperCase(), ann.username.toLowerCase()]) {
      expect(await login(form, ann.password), form).toEqual({ status: 200, userId: ann.id });
    }
    expect(linesWith(tollgate.output(), "usernames_adopted")).toMatchObject([
      { level: "info", adopted: 1, collisions: 1 },
    ]);
  });

  it("leaves a name two stored users share to the one that held its canonical form, and reports the other", async () => {
    expect(await login(twinLower.username.toUpperCase(), twinLower.password)).toEqual({
      status: 200,
      userId: twinLower.id,
    });
    // The other keeps its id (and sessions) but no longer logs in by that name.
    expect((await login(twinUpper.username, twinUpper.password)).status).toBe(401);
    expect(linesWith(tollgate?.output() ?? "", "username_collision")).toMatchObject([
      { level: "warn", userId: twinUpper.id, heldBy: twinLower.id },
    ]);
  });

  it("does not recreate from USERS_FILE a user deleted before the upgrade", async () => {
    expect((await login(gone, "a file password")).status).toBe(401);
    expect(linesWith(tollgate?.output() ?? "", "users_file_skipped")).toHaveLength(1);
  });

  it("adopts the names once per store: a restart has nothing left to do", async () => {
    await tollgate?.stop();
    tollgate = await start();
    expect(linesWith(tollgate.output(), "usernames_adopted")).toEqual([]);
    expect(await login(ann.username.toLowerCase(), ann.password)).toEqual({ status: 200, userId: ann.id });
  });

  it("adopts a user that an older instance stored since at its first login by the name as typed", async () => {
    await storeAsBefore(late);
    expect((await login(late.username.toUpperCase(), late.password)).status).toBe(401);
    expect(await login(late.username, late.password)).toEqual({ status: 200, userId: late.id });
    expect(await login(late.username.toUpperCase(), late.password)).toEqual({ status: 200, userId: late.id });
  });
});
