// Operations against real processes and a Redis of this file's own: failures, health, shutdown, logs.
import { request } from "node:http";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { login } from "../support/http-client.mjs";
import { monitorRedis } from "../support/local.mjs";
import {
  type RedisServer,
  startRedisServer,
  startTollgate,
  type TollgateProcess,
} from "../support/processes.mjs";
import { connectRedis } from "../support/redis.js";
import { ADMIN_TOKEN, JWT_SECRET } from "../support/secrets.mjs";

const PREFIX = "ops:";
const TIMEOUT_MS = 100;
/** What a check may take beyond REDIS_TIMEOUT_MS on a busy test machine. */
const MARGIN_MS = 250;
const CREATED_PASSWORD = "created-user-password-77";

let redis: RedisServer;
let open: TollgateProcess;
let closed: TollgateProcess;
/** Every tollgate process this file started, running or not: the log test reads them all. */
const started: TollgateProcess[] = [];
/** Every access token and session id handed out in this file: none may appear in a log. */
const issued: string[] = [];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function launch(env: Record<string, string>): Promise<TollgateProcess> {
  const proc = await startTollgate(env);
  started.push(proc);
  return proc;
}

const redisEnv = (failureMode: "open" | "closed"): Record<string, string> => ({
  REDIS_URL: redis.url,
  REDIS_KEY_PREFIX: PREFIX,
  REDIS_TIMEOUT_MS: String(TIMEOUT_MS),
  FAILURE_MODE: failureMode,
});

beforeAll(async () => {
  redis = await startRedisServer();
  [open, closed] = await Promise.all([launch(redisEnv("open")), launch(redisEnv("closed"))]);
});

afterAll(async () => {
  await Promise.all(started.map((p) => p.stop("SIGKILL")));
  await redis?.stop();
});

type LoginBody = Awaited<ReturnType<typeof login>>;

async function loginAs(base: string, username: string, password = "secret"): Promise<LoginBody> {
  const body = await login(base, username, password);
  issued.push(body.access_token, body.session_id);
  return body;
}

type Checked = { status: number; headers: Headers; body: string; ms: number; at: number };

/** One Envoy check of GET /api/products, timed. */
async function check(proc: TollgateProcess, token?: string): Promise<Checked> {
  const started = performance.now();
  const res = await fetch(`${proc.checkUrl}/ext_authz/api/products`, {
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
  });
  const body = await res.text();
  return { status: res.status, headers: res.headers, body, ms: performance.now() - started, at: started };
}

async function nginxCheck(proc: TollgateProcess, token: string): Promise<Checked> {
  const started = performance.now();
  const res = await fetch(`${proc.checkUrl}/nginx/auth`, {
    headers: {
      authorization: `Bearer ${token}`,
      "x-original-method": "GET",
      "x-original-uri": "/api/products",
    },
  });
  const body = await res.text();
  return { status: res.status, headers: res.headers, body, ms: performance.now() - started, at: started };
}

const degraded = (c: Checked): boolean => c.headers.get("x-ratelimit-degraded") === "true";

/** Runs `workers` loops of Envoy checks until `untilMs` (performance.now()), collecting every outcome. */
async function stream(proc: TollgateProcess, token: string, workers: number, untilMs: number) {
  const answers: Checked[] = [];
  const errors: string[] = [];
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (performance.now() < untilMs) {
        try {
          answers.push(await check(proc, token));
        } catch (error) {
          const cause = (error as Error & { cause?: { code?: string } }).cause;
          errors.push(cause?.code ?? (error as Error).message);
        }
      }
    }),
  );
  return { answers, errors };
}

function claims(token: string): { sub: string; sid: string; tier: string } {
  return JSON.parse(Buffer.from(token.split(".")[1] as string, "base64url").toString("utf8"));
}

async function getJson(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

async function sessionsOf(userId: string): Promise<number> {
  const { status, body } = await getJson(`${open.adminUrl}/admin/users/${userId}/sessions`, admin);
  expect(status).toBe(200);
  return body.total as number;
}

describe("sessions", () => {
  it("survive a tollgate restart: the old token still works against a new process", async () => {
    const first = await launch(redisEnv("open"));
    const session = await loginAs(first.url, "alice");
    expect(
      (await getJson(`${first.url}/me`, { authorization: `Bearer ${session.access_token}` })).status,
    ).toBe(200);
    expect(await first.stop("SIGTERM")).toBe(0);

    const second = await launch(redisEnv("open"));
    const me = await getJson(`${second.url}/me`, { authorization: `Bearer ${session.access_token}` });
    expect(me).toEqual({
      status: 200,
      body: {
        user_id: "demo-alice",
        username: "alice",
        tier: "free",
        device: "unknown",
        session_id: session.session_id,
      },
    });
    const checked = await check(second, session.access_token);
    expect([checked.status, checked.headers.get("x-user-id"), degraded(checked)]).toEqual([
      200,
      "demo-alice",
      false,
    ]);
    const out = await fetch(`${second.url}/auth/logout`, {
      method: "POST",
      headers: { authorization: `Bearer ${session.access_token}` },
    });
    expect(out.status).toBe(200);
    expect(await second.stop("SIGTERM")).toBe(0);
  });
});

describe("health and readiness while Redis answers", () => {
  it("starts without a store_down warning: the users wait for the first connection", () => {
    for (const proc of [open, closed]) {
      expect(proc.output()).toContain('"event":"users_loaded"');
      expect(proc.output()).not.toContain('"event":"store_down"');
    }
  });

  it("counts in users_loaded the demo users present, also those an earlier start created", async () => {
    // This file's first two processes created the demo users in this prefix; a third finds them.
    const again = await launch(redisEnv("open"));
    const line = again
      .output()
      .split("\n")
      .find((l) => l.includes('"event":"users_loaded"'));
    expect(JSON.parse(line ?? "{}")).toMatchObject({ count: 3, created: 0 });
    expect(line).toContain("alice, bob_pro and ent_carol present");
    expect(await again.stop("SIGTERM")).toBe(0);
  });

  it("answers /health and /ready with 200 on the public and the admin port", async () => {
    for (const base of [open.url, open.adminUrl]) {
      expect(await getJson(`${base}/health`)).toEqual({ status: 200, body: { status: "ok" } });
      expect(await getJson(`${base}/ready`)).toEqual({
        status: 200,
        body: { status: "ready", store: "redis" },
      });
    }
  });
});

describe("Redis paused with CLIENT PAUSE", () => {
  let pauser: Redis;
  beforeAll(() => {
    pauser = connectRedis(redis.url);
  });
  afterAll(() => pauser.disconnect());

  it("answers every check within REDIS_TIMEOUT_MS, degraded, and promptly again once the pause ends", async () => {
    const { access_token: token } = await loginAs(open.url, "ent_carol");
    const warm = await check(open, token);
    expect([warm.status, degraded(warm)]).toEqual([200, false]);

    const pausedAt = performance.now();
    expect(await pauser.call("CLIENT", "PAUSE", "3000", "ALL")).toBe("OK");
    const during = await stream(open, token, 20, pausedAt + 2400);
    expect(during.errors).toEqual([]);
    // Sequential checks in 20 loops over 2.4 s: nothing waited on the paused store beyond the deadline.
    expect(during.answers.length).toBeGreaterThan(20 * 8);
    expect(new Set(during.answers.map((a) => `${a.status} ${degraded(a)}`))).toEqual(new Set(["200 true"]));
    const slow = during.answers.filter((a) => a.ms >= TIMEOUT_MS + MARGIN_MS);
    expect(
      slow.map((a) => `${Math.round(a.ms)} ms, sent ${Math.round(a.at - pausedAt)} ms into the pause`),
    ).toEqual([]);

    await sleep(Math.max(0, pausedAt + 3000 + 50 - performance.now()));
    for (let i = 0; i < 10; i += 1) {
      const after = await check(open, token);
      expect([after.status, degraded(after), after.headers.get("x-ratelimit-limit")]).toEqual([
        200,
        false,
        "10000",
      ]);
      expect(after.ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    }
  });

  it("answers a login 503 when Redis stalls mid-login, and no session appears once Redis resumes", async () => {
    const before = await sessionsOf("demo-bob");
    // Pause Redis the moment the login has read the user: the session is then written into a stall.
    let pausedAt: number | undefined;
    const monitor = await monitorRedis(redis.url, (args, source) => {
      if (pausedAt !== undefined || source === "lua") return;
      if (String(args[0]).toLowerCase() === "hgetall" && args[1] === `${PREFIX}{u:demo-bob}:user`) {
        pausedAt = performance.now();
        void pauser.call("CLIENT", "PAUSE", "1500", "ALL");
      }
    });
    try {
      const res = await fetch(`${open.url}/auth/login`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ username: "bob_pro", password: "secret" }),
      });
      const body = (await res.json()) as Record<string, unknown>;
      expect(pausedAt).toBeDefined();
      expect([res.status, body.error, body.access_token]).toEqual([503, "unavailable", undefined]);
    } finally {
      monitor.close();
    }
    // Whatever tollgate had sent runs once the pause ends: give it that time, then look.
    await sleep(Math.max(0, (pausedAt ?? 0) + 1500 + 300 - performance.now()));
    expect(await sessionsOf("demo-bob")).toBe(before);
  });
});

describe("Redis killed and restarted (these run in order)", () => {
  let token = "";

  it("keeps answering a stream of concurrent checks across the kill: no 5xx, no connection error", async () => {
    ({ access_token: token } = await loginAs(open.url, "ent_carol"));
    const begin = performance.now();
    const kill = sleep(1000).then(() => redis.kill());
    const { answers, errors } = await stream(open, token, 20, begin + 2000);
    await kill;
    expect(errors).toEqual([]);
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([200]));
    const enforced = answers.filter((a) => !degraded(a));
    expect(enforced.length).toBeGreaterThan(0);
    expect(answers.length - enforced.length).toBeGreaterThan(0);
    expect(enforced.every((a) => a.headers.get("x-ratelimit-limit") === "10000")).toBe(true);
  });

  it("while Redis is down, lets valid tokens through degraded with the identity from their claims", async () => {
    const { sub, sid, tier } = claims(token);
    expect([sub, tier]).toEqual(["demo-carol", "enterprise"]);
    for (const answer of [await check(open, token), await nginxCheck(open, token)]) {
      expect(answer.status).toBe(200);
      expect(answer.ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
      expect({
        degraded: answer.headers.get("x-ratelimit-degraded"),
        user: answer.headers.get("x-user-id"),
        tier: answer.headers.get("x-user-tier"),
        session: answer.headers.get("x-session-id"),
        limit: answer.headers.get("x-ratelimit-limit"),
      }).toEqual({ degraded: "true", user: sub, tier, session: sid, limit: null });
    }
  });

  it("while Redis is down, still refuses a missing or forged token with 401", async () => {
    const [header, , signature] = token.split(".");
    const payload = Buffer.from(JSON.stringify({ ...claims(token), sub: "demo-bob" })).toString("base64url");
    const forged = await check(open, `${header}.${payload}.${signature}`);
    expect(forged.status).toBe(401);
    expect(forged.headers.get("www-authenticate")).toMatch(/^Bearer realm="tollgate", error="invalid_token"/);
    expect(JSON.parse(forged.body)).toMatchObject({ error: "unauthorized" });
    const missing = await check(open);
    expect([missing.status, missing.headers.get("www-authenticate")]).toEqual([
      401,
      'Bearer realm="tollgate"',
    ]);
  });

  it("while Redis is down, answers 503 JSON in FAILURE_MODE=closed", async () => {
    const answer = await check(closed, token);
    expect(answer.status).toBe(503);
    expect(answer.headers.get("content-type")).toBe("application/json");
    expect(JSON.parse(answer.body)).toEqual({
      error: "unavailable",
      message: "The rate-limit store is unavailable",
    });
    expect(answer.ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
  });

  it("while Redis is down, answers /ready 503 JSON and /health 200 on the public and the admin port", async () => {
    for (const proc of [open, closed]) {
      for (const base of [proc.url, proc.adminUrl]) {
        expect(await getJson(`${base}/health`)).toEqual({ status: 200, body: { status: "ok" } });
        const ready = await getJson(`${base}/ready`);
        expect(ready).toEqual({
          status: 503,
          body: { error: "unavailable", message: "The store does not answer" },
        });
      }
    }
  });

  it("while Redis is down, answers a login 503 JSON without a token", async () => {
    const res = await fetch(`${open.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "alice", password: "secret" }),
    });
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({
      error: "unavailable",
      message: "The session store is unavailable; try again shortly",
    });
  });

  it("enforces again within a few seconds of Redis coming back on the same port, without a restart", async () => {
    await redis.restart();
    const back = performance.now();
    /** Checks until the answer comes from the store again: neither degraded (open) nor 503 (closed). */
    const enforced = async (proc: TollgateProcess): Promise<Checked> => {
      let answer = await check(proc, token);
      while ((degraded(answer) || answer.status === 503) && performance.now() - back < 5000) {
        await sleep(50);
        answer = await check(proc, token);
      }
      return answer;
    };
    // The restarted Redis is empty: the session is gone, and enforcement says so.
    expect((await enforced(open)).status).toBe(401);
    expect((await enforced(closed)).status).toBe(401);
    expect(performance.now() - back).toBeLessThan(5000);
    for (const base of [open.url, open.adminUrl]) expect((await getJson(`${base}/ready`)).status).toBe(200);

    // The users went with the data: create one, log in through the public API, and get enforced.
    const created = await fetch(`${open.adminUrl}/admin/users`, {
      method: "POST",
      headers: { ...admin, "content-type": "application/json" },
      body: JSON.stringify({ username: "after_restart", password: CREATED_PASSWORD, tier: "free" }),
    });
    expect(created.status).toBe(201);
    const session = await loginAs(open.url, "after_restart", CREATED_PASSWORD);
    for (const proc of [open, closed]) {
      const fresh = await check(proc, session.access_token);
      expect({
        status: fresh.status,
        degraded: fresh.headers.get("x-ratelimit-degraded"),
        user: fresh.headers.get("x-user-id"),
        limit: fresh.headers.get("x-ratelimit-limit"),
        resource: fresh.headers.get("x-ratelimit-resource"),
      }).toEqual({ status: 200, degraded: null, user: session.user_id, limit: "100", resource: "general" });
    }
  });
});

type Outcome =
  | { kind: "response"; status: number; body: string; complete: boolean }
  | { kind: "refused" }
  /** RST before any byte of response: the kernel's answer for a connection still in the accept queue. */
  | { kind: "reset" }
  | { kind: "error"; code: string };

type Sent = { outcome: Promise<Outcome>; continued: Promise<void>; finish(): void };

/** One request on a fresh connection (no keep-alive); `finish` sends the body, when there is one. */
function send(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string },
): Sent {
  const headers = { connection: "close", ...options.headers };
  const req = request(url, { method: options.method ?? "GET", agent: false, headers });
  const continued = new Promise<void>((resolve) => req.on("continue", () => resolve()));
  const outcome = new Promise<Outcome>((resolve) => {
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("error", (error: NodeJS.ErrnoException) => resolve({ kind: "error", code: error.message }));
      res.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        const length = res.headers["content-length"];
        const complete = res.complete && (length === undefined || Number(length) === Buffer.byteLength(body));
        resolve({ kind: "response", status: res.statusCode ?? 0, body, complete });
      });
    });
    req.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "ECONNREFUSED") resolve({ kind: "refused" });
      // "socket hang up" (a FIN with no answer) is not a kernel reset: it fails the test.
      else if (/^(connect|read|write) ECONNRESET\b/.test(error.message) || error.code === "EPIPE") {
        resolve({ kind: "reset" });
      } else resolve({ kind: "error", code: error.message });
    });
  });
  if (options.body === undefined) {
    req.end();
    return { outcome, continued, finish: () => {} };
  }
  req.flushHeaders();
  return { outcome, continued, finish: () => req.end(options.body) };
}

const once = (url: string, headers: Record<string, string> = {}) => send(url, { headers }).outcome;

describe("graceful shutdown", () => {
  it("finishes requests in flight on SIGTERM before it exits 0", async () => {
    const proc = await launch({});
    const body = JSON.stringify({ username: "bob_pro", password: "secret" });
    // Each login is read by the server (it answered 100 Continue) but waits for its body.
    const held = Array.from({ length: 5 }, () =>
      send(`${proc.url}/auth/login`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "content-length": String(Buffer.byteLength(body)),
          expect: "100-continue",
        },
        body,
      }),
    );
    await Promise.all(held.map((h) => h.continued));
    const exit = proc.stop("SIGTERM");
    await sleep(300);
    expect(proc.child.exitCode).toBeNull();
    for (const h of held) h.finish();
    const outcomes = await Promise.all(held.map((h) => h.outcome));
    expect(await exit).toBe(0);
    for (const outcome of outcomes) {
      expect(outcome).toMatchObject({ kind: "response", status: 200, complete: true });
      const session = JSON.parse((outcome as { body: string }).body) as LoginBody;
      issued.push(session.access_token, session.session_id);
      expect(session.user_id).toBe("demo-bob");
    }
    // The listener stopped accepting at once.
    expect(await once(`${proc.url}/health`)).toEqual({ kind: "refused" });
  });

  it("drains under a load of fresh connections on SIGTERM: exit 0 within seconds, no broken response", async () => {
    const proc = await launch({});
    const { access_token: token } = await loginAs(proc.url, "ent_carol");
    const outcomes: Outcome[] = [];
    const loop = async (url: string, headers?: Record<string, string>) => {
      for (;;) {
        const outcome = await once(url, headers);
        outcomes.push(outcome);
        if (outcome.kind !== "response") return;
      }
    };
    const loops = [
      ...Array.from({ length: 20 }, () =>
        loop(`${proc.checkUrl}/ext_authz/api/products`, { authorization: `Bearer ${token}` }),
      ),
      ...Array.from({ length: 10 }, () => loop(`${proc.url}/health`)),
    ];
    await sleep(500);
    const signalAt = performance.now();
    const code = await proc.stop("SIGTERM");
    const exitMs = performance.now() - signalAt;
    await Promise.all(loops);

    expect(code).toBe(0);
    expect(exitMs).toBeLessThan(3000);
    const responses = outcomes.flatMap((o) => (o.kind === "response" ? [o] : []));
    expect(responses.length).toBeGreaterThan(30);
    // Every response that started arrived whole, and was an answer, not an error.
    expect(responses.filter((r) => !r.complete || r.status !== 200)).toEqual([]);
    expect(responses.filter((r) => r.body !== "" && r.body !== '{"status":"ok"}')).toEqual([]);
    // Each loop ended on the closed listener: refused, or reset while still queued in the kernel
    // (Linux resets the accept queue of a closed listening socket); never a hang-up or another error.
    const ends = outcomes.filter((o) => o.kind !== "response");
    expect(ends.flatMap((o) => (o.kind === "error" ? [o.code] : []))).toEqual([]);
    expect(ends).toHaveLength(30);
    expect(proc.output()).toContain('"event":"stopped"');
  });

  it("exits 0 on SIGINT", async () => {
    const proc = await launch({});
    expect((await once(`${proc.url}/health`)).kind).toBe("response");
    expect(await proc.stop("SIGINT")).toBe(0);
    expect(proc.output()).toMatch(/"event":"stopping","signal":"SIGINT"/);
  });
});

describe("logs of every process in this file", () => {
  const lines = () => started.flatMap((p) => p.output().split("\n")).filter((line) => line.trim() !== "");

  it("hold no token, password, secret or full session id", () => {
    expect(issued).toHaveLength(20);
    const all = started.map((p) => p.output()).join("\n");
    const forbidden = [...issued, JWT_SECRET, ADMIN_TOKEN, CREATED_PASSWORD];
    expect(forbidden.filter((s) => all.includes(s))).toEqual([]);
    // The demo password, as a word of its own (it is also part of the JWT secret, checked above).
    expect(all.match(/\bsecret\b/g) ?? []).toEqual([]);
  });

  it("are JSON lines, with an event for login, logout, store_down and store_recovered", () => {
    const parsed = lines().map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        throw new Error(`not a JSON log line: ${line}`);
      }
    });
    const events = new Set(parsed.map((l) => l.event));
    for (const event of ["login", "logout", "store_down", "store_recovered"]) expect(events).toContain(event);
    const loginLine = parsed.find((l) => l.event === "login");
    expect(loginLine).toMatchObject({ level: "info", userId: expect.any(String), ip: expect.any(String) });
    expect(loginLine?.sid).toMatch(/^.{6}…$/);
  });
});
