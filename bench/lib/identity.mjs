// Identities from outside tollgate for the bench: an identity provider of its own (node:http serving
// a JWKS of one RS256 key made with node:crypto, counting what it is asked), its tokens, an API key,
// and the refresh-storm guard measured (requests to the provider during a flood of unknown kids).
import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { createServer } from "node:http";
import { send } from "../../test/support/http-client.mjs";
import { cpuSecondsOf } from "./cpu.mjs";
import { fixed, pairedFigure, thousands } from "./report.mjs";

export const AUDIENCE = "api://tollgate-bench";

/** The provider: its URL, issuer, key and how many times its JWKS was fetched. */
export async function startBenchIdp() {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const jwk = { ...publicKey.export({ format: "jwk" }), kid: "bench-rs256", alg: "RS256", use: "sig" };
  let fetches = 0;
  const server = createServer((req, res) => {
    if (req.url !== "/jwks.json") {
      res.writeHead(404).end();
      return;
    }
    fetches += 1;
    res.writeHead(200, { "content-type": "application/json", "cache-control": "max-age=300" });
    res.end(JSON.stringify({ keys: [jwk] }));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    issuer: `${url}/`,
    jwksUrl: `${url}/jwks.json`,
    privateKey,
    fetches: () => fetches,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** tollgate's settings for the provider. EXTERNAL_DEFAULT_TIER pro: the bench's huge limits, as the allowed row's user has. */
export const idpEnv = (idp) => ({
  JWKS_URL: idp.jwksUrl,
  JWT_ISSUER: idp.issuer,
  JWT_AUDIENCE: AUDIENCE,
  EXTERNAL_DEFAULT_TIER: "pro",
});

const b64 = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");

/** An RS256 token of the provider for `sub`, valid for an hour; `kid` to name another key. */
export function providerToken(idp, sub, kid = "bench-rs256") {
  const now = Math.floor(Date.now() / 1000);
  const input = `${b64({ alg: "RS256", typ: "JWT", kid })}.${b64({ iss: idp.issuer, aud: AUDIENCE, sub, iat: now, exp: now + 3600 })}`;
  return `${input}.${sign("sha256", Buffer.from(input), idp.privateKey).toString("base64url")}`;
}

/** A pro API key made through the admin API. */
export async function benchApiKey(tollgate) {
  const reply = await send(`${tollgate.adminUrl}/admin/api-keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${tollgate.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "bench", tier: "pro" }),
  });
  if (reply.status !== 201) throw new Error(`creating the bench's API key: ${reply.status} ${reply.text}`);
  return JSON.parse(reply.text).key;
}

/**
 * `count` checks, 64 at a time, each with a token of a kid the provider never published: the
 * provider's JWKS fetches meanwhile (the guard allows one per 30 s) and the checks' statuses.
 */
async function refreshStorm(idp, checkUrl, count = 5_000) {
  const before = idp.fetches();
  const statuses = {};
  const started = performance.now();
  for (let done = 0; done < count; done += 64) {
    const batch = Array.from({ length: Math.min(64, count - done) }, (_, i) =>
      send(checkUrl, {
        headers: {
          authorization: `Bearer ${providerToken(idp, "storm", randomBytes(8).toString("hex"))}`,
          // An address per check: the anonymous window of one would turn the 401s into 429s.
          "x-forwarded-for": `10.200.${((done + i) >> 8) & 255}.${(done + i) & 255}`,
        },
      }),
    );
    for (const { status } of await Promise.all(batch)) statuses[status] = (statuses[status] ?? 0) + 1;
  }
  return {
    checks: count,
    seconds: (performance.now() - started) / 1000,
    providerFetches: idp.fetches() - before,
    statuses,
  };
}

/**
 * `count` checks, 64 at a time, each with a provider token tollgate has not seen (one subject per
 * token, signed before the clock starts): the verified-token cache misses every time, so each check
 * pays the RS256 verification. tollgate's CPU per check (from /proc) beside the cached row's.
 */
async function cacheMisses(idp, checkUrl, pid, count = 4_000) {
  const tokens = Array.from({ length: count }, (_, i) =>
    providerToken(idp, `miss-${i}-${randomBytes(4).toString("hex")}`),
  );
  const statuses = {};
  const before = cpuSecondsOf(pid);
  const started = performance.now();
  for (let done = 0; done < count; done += 64) {
    const batch = tokens
      .slice(done, done + 64)
      .map((token) => send(checkUrl, { headers: { authorization: `Bearer ${token}` } }));
    for (const { status } of await Promise.all(batch)) statuses[status] = (statuses[status] ?? 0) + 1;
  }
  const seconds = (performance.now() - started) / 1000;
  return { checks: count, seconds, cpuUs: ((cpuSecondsOf(pid) - before) * 1e6) / count, statuses };
}

/** The allowed rows of a provider token and an API key, beside the HS256 allowed row (`base`: its fields; `huge`: the limit). */
export const identityRows = (core, base, huge) => [
  {
    ...base,
    id: "allowed-provider",
    short: "allowed, provider RS256",
    label: `tollgate check, allowed: Envoy, provider RS256 token (JWKS), pro by EXTERNAL_DEFAULT_TIER, ${huge} → 200`,
    url: core.checkUrl,
    headers: { authorization: `Bearer ${core.external.token}` },
    expected: 200,
  },
  {
    ...base,
    id: "allowed-api-key",
    short: "allowed, API key",
    label: `tollgate check, allowed: Envoy, pro API key in X-API-Key, ${huge} → 200`,
    url: core.checkUrl,
    headers: { "x-api-key": core.external.apiKey },
    expected: 200,
  },
];

/** The refresh-storm guard measured, as the report's lines. */
export async function stormReport(core) {
  process.stderr.write("bench: the refresh-storm guard …\n");
  const storm = await refreshStorm(core.external.idp, core.checkUrl);
  process.stderr.write("bench: provider tokens the cache has not seen …\n");
  const misses = await cacheMisses(core.external.idp, core.checkUrl, core.tollgate.child.pid);
  return [
    `Verified-token cache misses: ${misses.checks} checks, each with an RS256 provider token tollgate had not ` +
      `seen (${JSON.stringify(misses.statuses)}), ${thousands(misses.checks / misses.seconds)} checks/s from one ` +
      `client 64 at a time, ${fixed(misses.cpuUs, 0)} µs of tollgate CPU per check (the "allowed, provider ` +
      "RS256\" row, whose token is verified once and then found in the cache, shows a hit's cost).",
    `Refresh-storm guard: ${storm.checks} checks with tokens of made-up kids in ${storm.seconds.toFixed(1)} s ` +
      `(${JSON.stringify(storm.statuses)}) cost the provider ${storm.providerFetches} JWKS request(s) ` +
      "(at most one per 30 s is allowed).",
    "",
  ];
}

/**
 * The identities' targets: a provider token and an API key against the HS256 allowed row (all three
 * loaded by autocannon), and cached denials against allowed checks, judged on the rows loaded by
 * h2load --h1 (64 connections, as wrk does): autocannon tops out near 20,000 requests/s beside a
 * tollgate on two cores, under what a cached denial can be answered at, so its pair shows the
 * generator's limit rather than tollgate's (it is printed beside, for the record).
 */
export function identityTargets(byId, paired = {}) {
  const [hs256, provider, apiKey] = ["allowed", "allowed-provider", "allowed-api-key"].map((id) => byId[id]);
  const [allowed, cached] = ["allowed-h2load", "denied-cached-h2load"].map((id) => byId[id]);
  const rate = (row, base) => row.load.rps / base.load.rps;
  const cpu = (row) => `${fixed(row.serverCpuUsPerRequest, 0)} µs`;
  const targets = [];
  if (hs256 !== undefined && provider !== undefined && apiKey !== undefined) {
    targets.push({
      target: "allowed checks/s with an RS256 provider token and with an API key ≥ 0.9× the HS256 row's",
      figure: `${[provider, apiKey]
        .map(
          (row) =>
            `${row.short.split(", ")[1]} ${fixed(rate(row, hs256), 2)}× (${thousands(row.load.rps)} at ${cpu(row)})`,
        )
        .join(", ")} of ${thousands(hs256.load.rps)} at ${cpu(hs256)}`,
      met: rate(provider, hs256) >= 0.9 && rate(apiKey, hs256) >= 0.9,
    });
  }
  if (allowed !== undefined && cached !== undefined) {
    const [acAllowed, acCached] = [byId.allowed, byId["denied-cached"]];
    // The bound on this ratio: a cached denial still pays the check listener's own HTTP work per
    // request, so it cannot run faster than that server answering 200 does beside the same allowed row.
    const bare = byId["own-ceiling-h2load"];
    const bound =
      bare === undefined
        ? ""
        : `; the check listener's bare server in the same run ${fixed(rate(bare, allowed), 2)}× (${thousands(bare.load.rps)} at ${cpu(bare)})`;
    const pair = paired["denied-cached-h2load/allowed-h2load"];
    const rows =
      `${fixed(rate(cached, allowed), 2)}× (${thousands(cached.load.rps)} at ${cpu(cached)} vs ${thousands(allowed.load.rps)} at ${cpu(allowed)}); ` +
      `by autocannon ${fixed(rate(acCached, acAllowed), 2)}× (${thousands(acCached.load.rps)} at ${cpu(acCached)} vs ` +
      `${thousands(acAllowed.load.rps)} at ${cpu(acAllowed)})${bound}`;
    targets.push({
      target:
        "cached denials ≥ 1.5× the allowed check's checks/s, both loaded by h2load --h1" +
        (pair === undefined ? "" : " (judged by the pairs of slices back to back)"),
      figure: pair === undefined ? rows : `${pairedFigure(pair)}; the rows: ${rows}`,
      met: (pair?.median ?? rate(cached, allowed)) >= 1.5,
    });
  }
  return targets;
}
