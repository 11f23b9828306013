// The identity provider's keys as tollgate keeps them, against the tests' own JWKS server: rotation,
// unknown kids (one refresh per interval, whatever the flood), a provider that is down or slow, a
// JWKS of more keys than the bounds (100 kept, 10 tried for a token without a kid).
import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { KeyTimings } from "../../src/auth/provider-keys.js";
import { type InProcessOnRedis, sleep, startInProcess } from "../support/in-process.js";
import {
  type JwksServer,
  makeKey,
  signToken,
  startJwksServer,
  type TestKey,
} from "../support/jwks-server.js";

const AUDIENCE = "api://keys";
const FAST: KeyTimings = {
  minRefreshMs: 50,
  maxRefreshMs: 60_000,
  defaultRefreshMs: 60_000,
  missingKeyIntervalMs: 30_000,
  fetchTimeoutMs: 300,
  retryMs: [50, 200],
};

describe("provider keys", () => {
  let idp: JwksServer | undefined;
  let t: InProcessOnRedis | undefined;
  afterEach(async () => {
    vi.useRealTimers();
    await t?.close();
    await idp?.close();
    t = undefined;
    idp = undefined;
  });

  const start = async (
    keys: TestKey[],
    timings: KeyTimings = FAST,
    oidc = false,
    jwtIssuer = (server: JwksServer) => server.issuer,
  ) => {
    idp = await startJwksServer(keys);
    const source: Record<string, string> = oidc ? { OIDC_ISSUER: idp.issuer } : { JWKS_URL: idp.jwksUrl };
    t = await startInProcess({
      env: { LOG_LEVEL: "info", ...source, JWT_ISSUER: jwtIssuer(idp), JWT_AUDIENCE: AUDIENCE },
      keyTimings: timings,
    });
    return { idp, t };
  };
  const token = (key: TestKey, header: Record<string, unknown> = {}) => {
    const now = Math.floor(Date.now() / 1000);
    const sub = `user-${randomBytes(4).toString("hex")}`;
    return signToken(key, { iss: idp?.issuer, aud: AUDIENCE, sub, exp: now + 120 }, header);
  };
  let ips = 0;
  const check = async (tok: string, target = t) => {
    ips += 1;
    const ip = ips;
    const started = performance.now();
    const res = await fetch(`${target?.checkUrl}/ext_authz/api/products`, {
      // An address per check: a flood of bad tokens would fill one address's anonymous window.
      headers: { authorization: `Bearer ${tok}`, "x-forwarded-for": `10.9.${ip >> 8}.${ip & 255}` },
    });
    return { status: res.status, body: await res.text(), ms: performance.now() - started };
  };

  it("finds the keys through OIDC discovery", async () => {
    const k1 = makeKey("disc-1");
    const { idp, t } = await start([k1], FAST, true);
    await t.tollgate.providerKeys?.ready();
    expect(idp.discoveryRequests()).toBe(1);
    expect((await check(token(k1))).status).toBe(200);
    expect(t.logWrites().some((line) => line.includes("provider_issuer_mismatch"))).toBe(false);
  });

  it("warns once, at start, when JWT_ISSUER and the discovery document's issuer differ in a trailing slash, and says so to such a token", async () => {
    const k1 = makeKey("disc-slash");
    // OIDC_ISSUER and the document say ".../"; JWT_ISSUER lacks the slash.
    const { idp, t } = await start([k1], { ...FAST, minRefreshMs: 50, maxRefreshMs: 50 }, true, (server) =>
      server.issuer.replace(/\/$/, ""),
    );
    await t.tollgate.providerKeys?.ready();
    const warnings = () =>
      t
        .logWrites()
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .filter((line) => line.event === "provider_issuer_mismatch");
    expect(warnings()).toMatchObject([
      {
        level: "warn",
        jwtIssuer: idp.url,
        oidcIssuer: idp.issuer,
        msg: expect.stringContaining("differ in a trailing slash"),
      },
    ]);
    // Refreshes read the same document: no warning again.
    await vi.waitFor(() => expect(idp.discoveryRequests()).toBeGreaterThanOrEqual(3), { timeout: 2_000 });
    expect(warnings()).toHaveLength(1);
    const answer = await check(token(k1));
    expect(answer.status).toBe(401);
    expect(JSON.parse(answer.body).message).toBe(
      "token issuer not accepted: it and JWT_ISSUER differ in a trailing slash",
    );
  });

  it("follows a rotation: a new kid is fetched once and verifies, a withdrawn key verifies nothing more", async () => {
    const k1 = makeKey("rot-1");
    const k2 = makeKey("rot-2", "ES256");
    const { idp, t } = await start([k1], { ...FAST, minRefreshMs: 60_000 });
    await t.tollgate.providerKeys?.ready();
    const old = token(k1);
    expect((await check(old)).status).toBe(200);
    const before = idp.jwksRequests();
    idp.keys = [k2];
    const fresh = await check(token(k2));
    expect(fresh.status, fresh.body).toBe(200);
    expect(idp.jwksRequests()).toBe(before + 1);
    // The cached verification of the old token went with its key.
    expect((await check(old)).status).toBe(401);
  });

  it("forgets the tokens a key verified when the provider replaces that key under the same kid", async () => {
    const k1 = makeKey("same-1");
    const { idp, t } = await start([k1], { ...FAST, minRefreshMs: 60_000 });
    await t.tollgate.providerKeys?.ready();
    const old = token(k1);
    expect((await check(old)).status).toBe(200);
    const before = idp.jwksRequests();
    idp.keys = [makeKey("same-1")];
    // A made-up kid is what makes tollgate look again before the refresh is due.
    expect((await check(token(k1, { kid: "not-there" }))).status).toBe(401);
    expect(idp.jwksRequests()).toBe(before + 1);
    expect((await check(old)).status).toBe(401);
  });

  it("forgets the tokens a key verified when the provider publishes it for another alg under the same kid", async () => {
    const k1 = makeKey("realg-1");
    const { idp, t } = await start([k1], { ...FAST, minRefreshMs: 60_000 });
    await t.tollgate.providerKeys?.ready();
    const old = token(k1);
    expect((await check(old)).status).toBe(200);
    // The same numbers, now for PS256 only: the verifier refuses the RS256 token, so must the cache.
    idp.keys = [{ ...k1, alg: "PS256" }];
    expect((await check(token(k1, { kid: "not-there" }))).status).toBe(401);
    expect(JSON.parse((await check(old)).body).message).toBe("token signature invalid");
    expect((await check(token({ ...k1, alg: "PS256" }))).status).toBe(200);
  });

  it("accepts the first token of a key replaced under the same kid, fetching the keys once, and refuses the old key's", async () => {
    const k1 = makeKey("swap-1");
    const { idp, t } = await start([k1], { ...FAST, minRefreshMs: 60_000 });
    await t.tollgate.providerKeys?.ready();
    const old = token(k1);
    expect((await check(old)).status).toBe(200);
    const before = idp.jwksRequests();
    const replaced = makeKey("swap-1");
    idp.keys = [replaced];
    const first = await check(token(replaced));
    expect(first.status, first.body).toBe(200);
    expect(idp.jwksRequests()).toBe(before + 1);
    expect((await check(old)).status).toBe(401);
    expect((await check(token(replaced))).status).toBe(200);
    expect(idp.jwksRequests()).toBe(before + 1);
  });

  it("accepts a key replaced under the same kid within one interval, even when a refresh for a missing key just ran", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const k1 = makeKey("swap-2");
    const { idp, t } = await start([k1], { ...FAST, minRefreshMs: 60_000 });
    await t.tollgate.providerKeys?.ready();
    // A made-up kid spends the interval's refresh just before the provider replaces its key.
    expect((await check(token(k1, { kid: "made-up" }))).status).toBe(401);
    const before = idp.jwksRequests();
    const replaced = makeKey("swap-2");
    idp.keys = [replaced];
    const rotated = token(replaced);
    for (const step of [0, 29_000]) {
      vi.setSystemTime(Date.now() + step);
      const early = await check(rotated);
      expect(JSON.parse(early.body).message).toBe("token signature invalid");
    }
    expect(idp.jwksRequests()).toBe(before);
    // The interval is over: the same token (its failure remembered) asks again, and passes.
    vi.setSystemTime(Date.now() + 1_000);
    const late = await check(rotated);
    expect(late.status, late.body).toBe(200);
    expect(idp.jwksRequests()).toBe(before + 1);
  });

  it("asks the provider at most once per interval during a flood of forged signatures under a real kid, made-up kids sharing that refresh", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const k1 = makeKey("forged-1");
    const forger = makeKey("forged-1");
    const { idp, t } = await start([k1]);
    await t.tollgate.providerKeys?.ready();
    await sleep(100);
    const before = idp.jwksRequests();
    const flood = async (make: () => string) => {
      const answers = await Promise.all(Array.from({ length: 150 }, () => check(make())));
      expect(answers.every((a) => a.status === 401)).toBe(true);
    };
    const forged = () => token(forger);
    const madeUp = () => token(k1, { kid: randomBytes(6).toString("hex") });
    await flood(madeUp);
    expect(idp.jwksRequests() - before).toBe(1);
    await flood(forged);
    expect(idp.jwksRequests() - before).toBe(1);
    vi.setSystemTime(Date.now() + 30_000);
    await flood(forged);
    expect(idp.jwksRequests() - before).toBe(2);
    vi.setSystemTime(Date.now() + 10_000);
    await flood(forged);
    await flood(madeUp);
    expect(idp.jwksRequests() - before).toBe(2);
    expect((await check(token(k1))).status).toBe(200);
  });

  it("keeps the last good keys when the provider is down for the refresh a replaced key starts, and takes the new key once it answers", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const k1 = makeKey("swap-down");
    // No retry within the test: only refreshes for missing keys fetch.
    const { idp, t } = await start([k1], { ...FAST, minRefreshMs: 60_000, retryMs: [60_000, 60_000] });
    await t.tollgate.providerKeys?.ready();
    const failures = () => t.logWrites().filter((l) => l.includes("provider_keys_failed")).length;
    const replaced = makeKey("swap-down");
    idp.keys = [replaced];
    idp.down = true;
    const rotated = token(replaced);
    expect(JSON.parse((await check(rotated)).body).message).toBe("token signature invalid");
    await vi.waitFor(() => expect(failures()).toBe(1));
    // The old key still verifies, a token it signed never seen before included.
    expect((await check(token(k1))).status).toBe(200);
    expect(t.tollgate.providerKeys?.candidates("swap-down").map((k) => k.key.equals(k1.publicKey))).toEqual([
      true,
    ]);
    idp.down = false;
    vi.setSystemTime(Date.now() + 30_000);
    const late = await check(rotated);
    expect(late.status, late.body).toBe(200);
    expect((await check(token(k1))).status).toBe(401);
  });

  it("verifies again a token that failed once the provider publishes the key that signed it", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const k1 = makeKey("late-1");
    const { idp, t } = await start([k1], { ...FAST, minRefreshMs: 60_000 });
    await t.tollgate.providerKeys?.ready();
    const newer = makeKey("late-1");
    const early = token(newer);
    const before = idp.jwksRequests();
    // Retried: the failure is remembered, and still a failure. The first asked the provider (which
    // did not publish the key yet), and spent the interval's refresh.
    for (let i = 0; i < 3; i += 1) {
      expect(JSON.parse((await check(early)).body).message).toBe("token signature invalid");
    }
    expect(idp.jwksRequests()).toBe(before + 1);
    // Added beside the key the kid named: nothing removed, something added. Another token's made-up
    // kid, once the interval is over, is what makes tollgate look again.
    idp.keys = [k1, newer];
    vi.setSystemTime(Date.now() + 30_000);
    expect((await check(token(k1, { kid: "not-there" }))).status).toBe(401);
    expect(idp.jwksRequests()).toBe(before + 2);
    const late = await check(early);
    expect(late.status, late.body).toBe(200);
    expect((await check(token(k1))).status).toBe(200);
  });

  it("keeps an RSA and an EC key published under one kid, and verifies with the one that fits the token's alg", async () => {
    const rsa = makeKey("shared-kid", "RS256");
    const ec = makeKey("shared-kid", "ES256");
    const { t } = await start([rsa, ec]);
    await t.tollgate.providerKeys?.ready();
    for (const key of [rsa, ec]) {
      const answer = await check(token(key));
      expect(answer.status, `${key.alg}: ${answer.body}`).toBe(200);
    }
    // The RSA key's token under ES256 still fits no key.
    expect((await check(token(rsa, { alg: "ES256" }))).status).toBe(401);
  });

  it("keeps every key without a kid, and verifies a token without one against them, asking the provider nothing while one verifies", async () => {
    const first = makeKey("");
    const second = makeKey("", "ES256");
    const third = makeKey("");
    const { idp, t } = await start([first, second, third]);
    await t.tollgate.providerKeys?.ready();
    expect(t.logWrites().some((l) => l.includes('"event":"provider_keys"') && l.includes('"keys":3'))).toBe(
      true,
    );
    const before = idp.jwksRequests();
    for (const key of [first, second, third]) {
      const answer = await check(token(key, { kid: undefined }));
      expect(answer.status, `${key.alg}: ${answer.body}`).toBe(200);
    }
    expect(idp.jwksRequests()).toBe(before);
    // A token no key verifies asks once whether the provider has a key it signed with.
    const stranger = await check(token(makeKey(""), { kid: undefined }));
    expect(JSON.parse(stranger.body).message).toBe("token signature invalid");
    expect(idp.jwksRequests()).toBe(before + 1);
  });

  const pastBounds = (target: InProcessOnRedis) =>
    target
      .logWrites()
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => line.event === "provider_keys_past_bounds");

  it("keeps the first 100 keys of a JWKS: a key listed after them verifies nothing, and each refresh says so once", async () => {
    const listed = Array.from({ length: 103 }, (_, i) => makeKey(`many-${i}`, "ES256"));
    const { idp, t } = await start(listed, { ...FAST, minRefreshMs: 60_000 });
    await t.tollgate.providerKeys?.ready();
    for (const key of [listed[0], listed[99]] as TestKey[]) {
      const answer = await check(token(key));
      expect(answer.status, answer.body).toBe(200);
    }
    // Its kid is unknown: it asks the provider once, which lists it past the bound again.
    const past = await check(token(listed[100] as TestKey));
    expect(past.status).toBe(401);
    expect(JSON.parse(past.body).message).toBe("token signing key unknown");
    await vi.waitFor(() => expect(pastBounds(t)).toHaveLength(idp.jwksRequests()));
    expect(idp.jwksRequests()).toBe(2);
    expect(pastBounds(t)[0]).toMatchObject({ level: "warn", notRead: 3, untriedWithoutKid: { ES256: 90 } });
  });

  it("tries a token without a kid against the first 10 keys that fit its alg, and verifies one with a kid against any", async () => {
    const rsa = makeKey("");
    const ec = Array.from({ length: 12 }, () => makeKey("", "ES256"));
    const named = makeKey("named", "ES256");
    const { t } = await start([...ec, rsa, named]);
    await t.tollgate.providerKeys?.ready();
    for (const key of [ec[0], ec[9], rsa] as TestKey[]) {
      const answer = await check(token(key, { kid: undefined }));
      expect(answer.status, `${key.alg}: ${answer.body}`).toBe(200);
    }
    const eleventh = await check(token(ec[10] as TestKey, { kid: undefined }));
    expect(eleventh.status).toBe(401);
    expect(JSON.parse(eleventh.body).message).toBe("token signature invalid");
    expect((await check(token(named))).status).toBe(200);
    expect(pastBounds(t)[0]).toMatchObject({ notRead: 0, untriedWithoutKid: { ES256: 3 } });
  });

  it("accepts the first token without a kid of a provider that replaced its only key, within the interval unknown kids share", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const only = makeKey("");
    const { idp, t } = await start([only], { ...FAST, minRefreshMs: 60_000 });
    await t.tollgate.providerKeys?.ready();
    const old = token(only, { kid: undefined });
    expect((await check(old)).status).toBe(200);
    const before = idp.jwksRequests();
    const replaced = makeKey("");
    idp.keys = [replaced];
    // Before: 401 until the scheduled refresh, up to an hour later.
    const first = await check(token(replaced, { kid: undefined }));
    expect(first.status, first.body).toBe(200);
    expect(idp.jwksRequests()).toBe(before + 1);
    expect((await check(old)).status).toBe(401);
    // The interval's refresh is spent: forged tokens without a kid, and made-up kids, ask nothing more.
    const forger = makeKey("");
    for (let i = 0; i < 20; i += 1) {
      expect((await check(token(forger, { kid: undefined }))).status).toBe(401);
      expect((await check(token(replaced, { kid: randomBytes(6).toString("hex") }))).status).toBe(401);
    }
    expect(idp.jwksRequests()).toBe(before + 1);
    vi.setSystemTime(Date.now() + 30_000);
    expect((await check(token(forger, { kid: undefined }))).status).toBe(401);
    expect(idp.jwksRequests()).toBe(before + 2);
  });

  it("answers a route without limits before reading the token: a made-up kid there asks the provider nothing", async () => {
    const k1 = makeKey("health-1");
    const { idp, t } = await start([k1]);
    await t.tollgate.providerKeys?.ready();
    const before = idp.jwksRequests();
    const res = await fetch(`${t.checkUrl}/ext_authz/health`, {
      headers: { authorization: `Bearer ${token(k1, { kid: "made-up" })}` },
    });
    expect(res.status).toBe(200);
    expect(idp.jwksRequests()).toBe(before);
    // The same token on a limited route is read, and its unknown kid asks once.
    expect((await check(token(k1, { kid: "made-up" }))).status).toBe(401);
    expect(idp.jwksRequests()).toBe(before + 1);
  });

  it("asks the provider nothing for an expired or foreign token with a made-up kid: its claims are read first", async () => {
    const k1 = makeKey("claims-1");
    const { idp, t } = await start([k1]);
    await t.tollgate.providerKeys?.ready();
    const before = idp.jwksRequests();
    const now = Math.floor(Date.now() / 1000);
    const made = (claims: Record<string, unknown>) =>
      signToken(
        k1,
        { iss: idp.issuer, aud: AUDIENCE, sub: "claims-sub", exp: now + 120, ...claims },
        {
          kid: randomBytes(6).toString("hex"),
        },
      );
    const expired = await check(made({ exp: now - 60 }));
    expect(expired.status).toBe(401);
    expect(JSON.parse(expired.body).message).toBe("token expired");
    const foreign = await check(made({ aud: "api://elsewhere" }));
    expect(JSON.parse(foreign.body).message).toBe("token audience not accepted");
    expect(idp.jwksRequests()).toBe(before);
  });

  it("asks the provider at most once per interval during a flood of made-up kids", async () => {
    const k1 = makeKey("flood-1");
    const { idp, t } = await start([k1]);
    await t.tollgate.providerKeys?.ready();
    await sleep(100);
    const before = idp.jwksRequests();
    const answers = await Promise.all(
      Array.from({ length: 300 }, () => check(token(k1, { kid: randomBytes(6).toString("hex") }))),
    );
    expect(answers.every((a) => a.status === 401)).toBe(true);
    expect(idp.jwksRequests() - before).toBeLessThanOrEqual(1);
    expect((await check(token(k1))).status).toBe(200);
  });

  it("keeps the last good keys while the provider is down", async () => {
    const k1 = makeKey("down-1");
    const { idp, t } = await start([k1], { ...FAST, defaultRefreshMs: 100 });
    await t.tollgate.providerKeys?.ready();
    idp.down = true;
    const failedBefore = t.logWrites().filter((l) => l.includes("provider_keys_failed")).length;
    await sleep(400);
    expect(t.logWrites().filter((l) => l.includes("provider_keys_failed")).length).toBeGreaterThan(
      failedBefore,
    );
    expect((await check(token(k1))).status).toBe(200);
  });

  it("answers promptly while a slow provider has not given its first keys, then verifies once it has", async () => {
    const k1 = makeKey("slow-1");
    idp = await startJwksServer([k1]);
    idp.delayMs = 1_000;
    t = await startInProcess({
      env: { LOG_LEVEL: "info", JWKS_URL: idp.jwksUrl, JWT_ISSUER: idp.issuer, JWT_AUDIENCE: AUDIENCE },
      keyTimings: FAST,
    });
    expect(t.tollgate.providerKeys?.loaded()).toBe(false);
    const early = await check(token(k1));
    expect(early.status).toBe(401);
    expect(JSON.parse(early.body).message).toBe("the provider's keys are not loaded yet");
    expect(early.ms).toBeLessThan(600);
    await sleep(400);
    expect(t.logWrites().some((l) => l.includes("provider_keys_failed"))).toBe(true);
    idp.delayMs = 0;
    await t.tollgate.providerKeys?.ready();
    expect((await check(token(k1))).status).toBe(200);
  });

  it("holds provider tokens to JWT_CLOCK_TOLERANCE_SECONDS on exp and nbf, a cached token included", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const k1 = makeKey("leeway-1");
    idp = await startJwksServer([k1]);
    const server = idp;
    const tolerant = (seconds: string) =>
      startInProcess({
        env: {
          LOG_LEVEL: "silent",
          JWKS_URL: server.jwksUrl,
          JWT_ISSUER: server.issuer,
          JWT_AUDIENCE: AUDIENCE,
          JWT_CLOCK_TOLERANCE_SECONDS: seconds,
        },
        keyTimings: FAST,
      });
    t = await tolerant("60");
    const strict = await tolerant("0");
    try {
      await Promise.all([t.tollgate.providerKeys?.ready(), strict.tollgate.providerKeys?.ready()]);
      const lenient = t;
      const at = (target: InProcessOnRedis, tok: string) => check(tok, target);
      const now = Math.floor(Date.now() / 1000);
      const made = (extra: Record<string, unknown>) =>
        signToken(k1, { iss: server.issuer, aud: AUDIENCE, sub: "leeway-sub", exp: now + 10, ...extra });
      const token = made({});
      expect((await at(lenient, token)).status).toBe(200);
      // Not valid for 30 s more: inside 60 s of tolerance, outside none.
      const early = made({ nbf: now + 30 });
      expect((await at(lenient, early)).status).toBe(200);
      expect(JSON.parse((await at(strict, early)).body).message).toBe("token not yet valid");
      vi.setSystemTime((now + 10 + 59) * 1000);
      expect((await at(lenient, token)).status).toBe(200);
      expect((await at(lenient, made({ jti: "fresh" }))).status).toBe(200);
      expect(JSON.parse((await at(strict, made({ jti: "other" }))).body).message).toBe("token expired");
      vi.setSystemTime((now + 10 + 61) * 1000);
      expect(JSON.parse((await at(lenient, token)).body).message).toBe("token expired");
    } finally {
      await strict.close();
    }
  });

  it("honours Cache-Control max-age within its bounds", async () => {
    const k1 = makeKey("age-1");
    idp = await startJwksServer([k1]);
    idp.cacheControl = "public, max-age=0";
    t = await startInProcess({
      env: { LOG_LEVEL: "silent", JWKS_URL: idp.jwksUrl, JWT_ISSUER: idp.issuer, JWT_AUDIENCE: AUDIENCE },
      keyTimings: { ...FAST, minRefreshMs: 200 },
    });
    await t.tollgate.providerKeys?.ready();
    await sleep(700);
    // max-age=0, bounded below by 200 ms: three or four fetches in 700 ms, not hundreds.
    expect(idp.jwksRequests()).toBeGreaterThanOrEqual(3);
    expect(idp.jwksRequests()).toBeLessThanOrEqual(5);
  });
});
