// What a provider's answers may make tollgate do: a discovery document that names another issuer or
// sends tollgate to keys outside https is refused, and a body past 1 MB is cut off as it arrives,
// never held whole. A provider of the tests' own on node:http.
import { generateKeyPairSync } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import {
  createProviderKeys,
  type FetchOutcome,
  KEY_TIMINGS,
  type KeyTimings,
} from "../../src/auth/provider-keys.js";

const FAST: KeyTimings = {
  minRefreshMs: 60_000,
  maxRefreshMs: 60_000,
  defaultRefreshMs: 60_000,
  missingKeyIntervalMs: 30_000,
  fetchTimeoutMs: 5_000,
  retryMs: [60_000, 60_000],
};

const jwks = () => {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return { keys: [{ ...publicKey.export({ format: "jwk" }), kid: "k1", alg: "ES256", use: "sig" }] };
};

let servers: Server[] = [];
let stops: (() => void)[] = [];
afterEach(async () => {
  for (const stop of stops) stop();
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  servers = [];
  stops = [];
});

/** A provider answering each path (whatever the query) with a handler; its base URL and how many bytes it wrote. */
async function provider(
  routes: Record<string, (base: string, res: import("node:http").ServerResponse) => void>,
) {
  let written = 0;
  const server = createServer((req, res) => {
    const write = res.write.bind(res);
    res.write = ((chunk: Buffer | string, ...rest: never[]) => {
      written += Buffer.byteLength(chunk);
      return write(chunk, ...rest);
    }) as typeof res.write;
    const route = routes[(req.url ?? "").split("?")[0] ?? ""];
    if (route === undefined) res.writeHead(404).end();
    else route(base, res);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { base, written: () => written };
}

/** The first fetch's outcome of a key set read from `source`. */
function firstFetch(
  source: { kind: "oidc"; issuerUrl: string; httpAnyHost?: boolean } | { kind: "jwks"; url: string },
  timings: KeyTimings = FAST,
) {
  // Outside production by default, as the tests' other providers run.
  const keys = createProviderKeys(
    { source: source.kind === "oidc" ? { httpAnyHost: true, ...source } : source },
    timings,
  );
  stops.push(() => keys.stop());
  const outcome = new Promise<FetchOutcome>((resolve) => keys.onFetch((o) => resolve(o)));
  keys.start();
  return { keys, outcome };
}

const json = (body: unknown) => (_: string, res: import("node:http").ServerResponse) => {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
};

describe("a provider's answers", () => {
  it("loads keys through a discovery document of the configured issuer", async () => {
    const idp = await provider({
      "/.well-known/openid-configuration": (base, res) =>
        json({ issuer: base, jwks_uri: `${base}/jwks` })(base, res),
      "/jwks": json(jwks()),
    });
    const { keys, outcome } = firstFetch({ kind: "oidc", issuerUrl: idp.base });
    expect(await outcome).toMatchObject({ ok: true });
    expect(keys.candidates("k1")).toHaveLength(1);
  });

  it("refuses a discovery document that names another issuer, and one whose jwks_uri is not http(s)", async () => {
    const foreign = await provider({
      "/.well-known/openid-configuration": (base, res) =>
        json({ issuer: "https://attacker.example", jwks_uri: `${base}/jwks` })(base, res),
      "/jwks": json(jwks()),
    });
    const a = firstFetch({ kind: "oidc", issuerUrl: foreign.base });
    expect(await a.outcome).toMatchObject({ ok: false });
    expect(a.keys.loaded()).toBe(false);

    const key = jwks().keys[0];
    const dataUri = `data:application/json,${encodeURIComponent(JSON.stringify({ keys: [key] }))}`;
    const data = await provider({
      "/.well-known/openid-configuration": (base, res) =>
        json({ issuer: base, jwks_uri: dataUri })(base, res),
    });
    const b = firstFetch({ kind: "oidc", issuerUrl: data.base });
    expect(await b.outcome).toMatchObject({ ok: false });
    expect(b.keys.loaded()).toBe(false);
  });

  it("refuses in production a plain-http jwks_uri off loopback, though OIDC_ISSUER is plain http on loopback (a sidecar)", async () => {
    // Never fetched: refused before any request, whatever the name would resolve to.
    const elsewhere = "http://keys.idp.example:8080/jwks";
    const idp = await provider({
      "/.well-known/openid-configuration": (base, res) =>
        json({ issuer: base, jwks_uri: elsewhere })(base, res),
    });
    const refused = firstFetch({ kind: "oidc", issuerUrl: idp.base, httpAnyHost: false });
    expect(await refused.outcome).toEqual({
      ok: false,
      attempt: 1,
      error: `${idp.base}/.well-known/openid-configuration: the discovery document's jwks_uri must be https, or http on a loopback host, in production (or JWT_PROVIDER_ALLOW_HTTP=true where the network protects the link)`,
    });
    // Allowed (outside production, or JWT_PROVIDER_ALLOW_HTTP=true): fetched, and failing only there.
    const allowed = firstFetch({ kind: "oidc", issuerUrl: idp.base, httpAnyHost: true });
    const outcome = await allowed.outcome;
    expect(outcome.ok).toBe(false);
    expect((outcome as { error: string }).error).toMatch(/^http:\/\/keys\.idp\.example:8080\/jwks: /);
  });

  it("takes in production a plain-http jwks_uri on loopback beside a loopback OIDC_ISSUER", async () => {
    const idp = await provider({
      "/.well-known/openid-configuration": (base, res) =>
        json({ issuer: base, jwks_uri: `${base}/jwks` })(base, res),
      "/jwks": json(jwks()),
    });
    expect(await firstFetch({ kind: "oidc", issuerUrl: idp.base, httpAnyHost: false }).outcome).toMatchObject(
      {
        ok: true,
      },
    );
  });

  it("refuses a discovery document without an issuer, and one whose issuer differs by a trailing slash, naming both", async () => {
    const nameless = await provider({
      "/.well-known/openid-configuration": (base, res) => json({ jwks_uri: `${base}/jwks` })(base, res),
      "/jwks": json(jwks()),
    });
    const a = firstFetch({ kind: "oidc", issuerUrl: nameless.base });
    expect(await a.outcome).toEqual({
      ok: false,
      attempt: 1,
      error: `${nameless.base}/.well-known/openid-configuration: the discovery document names no issuer (OIDC_ISSUER is "${nameless.base}")`,
    });
    expect(a.keys.loaded()).toBe(false);

    const slashed = await provider({
      "/.well-known/openid-configuration": (base, res) =>
        json({ issuer: `${base}/`, jwks_uri: `${base}/jwks` })(base, res),
      "/jwks": json(jwks()),
    });
    const b = firstFetch({ kind: "oidc", issuerUrl: slashed.base });
    expect(await b.outcome).toEqual({
      ok: false,
      attempt: 1,
      error: `${slashed.base}/.well-known/openid-configuration: the discovery document names the issuer "${slashed.base}/", not OIDC_ISSUER "${slashed.base}"; they must match exactly (a trailing slash counts)`,
    });
    // Configured as the document names it, with its slash: found.
    const c = firstFetch({ kind: "oidc", issuerUrl: `${slashed.base}/` });
    expect(await c.outcome).toMatchObject({ ok: true });
  });

  it("says which URL failed and why, in a few words: a redirect, a body not JSON, a body that stalls", async () => {
    const idp = await provider({
      "/moved": (_, res) => {
        res.writeHead(302, { location: "/keys/elsewhere?token=LOCATION_SECRET" }).end("moved");
      },
      "/html": (_, res) => {
        res.writeHead(200, { "content-type": "text/html" }).end("<html>BODY_SECRET</html>");
      },
      "/stalls": (_, res) => {
        res.writeHead(200, { "content-type": "application/json" });
        res.write('{"keys": [');
      },
      "/empty": json({ keys: [] }),
    });
    const quick = { ...FAST, fetchTimeoutMs: 300 };
    const errorOf = async (path: string) => {
      const outcome = await firstFetch({ kind: "jwks", url: `${idp.base}${path}?key=QUERY_SECRET` }, quick)
        .outcome;
      expect(outcome.ok).toBe(false);
      return outcome.ok ? "" : outcome.error;
    };
    const errors = {
      moved: await errorOf("/moved"),
      html: await errorOf("/html"),
      stalls: await errorOf("/stalls"),
      empty: await errorOf("/empty"),
    };
    expect(errors).toEqual({
      moved: `${idp.base}/moved: redirect refused (302 to ${idp.base}/keys/elsewhere)`,
      html: `${idp.base}/html: not JSON`,
      stalls: `${idp.base}/stalls: timed out after 300 ms`,
      empty: `${idp.base}/empty: the JWKS holds no usable signature key`,
    });
    expect(JSON.stringify(errors)).not.toMatch(/SECRET/);
  });

  it("refreshes within the hour whatever Cache-Control allows, and sooner when it says so", async () => {
    const withMaxAge = (seconds: number) => (_: string, res: import("node:http").ServerResponse) => {
      res.writeHead(200, {
        "content-type": "application/json",
        "cache-control": `public, max-age=${seconds}`,
      });
      res.end(JSON.stringify(jwks()));
    };
    const idp = await provider({ "/day": withMaxAge(86_400), "/ten-minutes": withMaxAge(600) });
    const nothingPast = { notRead: 0, untried: [] };
    const day = firstFetch({ kind: "jwks", url: `${idp.base}/day` }, KEY_TIMINGS);
    expect(await day.outcome).toEqual({
      ok: true,
      keys: 1,
      refreshInMs: 3_600_000,
      refused: [],
      past: nothingPast,
    });
    const short = firstFetch({ kind: "jwks", url: `${idp.base}/ten-minutes` }, KEY_TIMINGS);
    expect(await short.outcome).toEqual({
      ok: true,
      keys: 1,
      refreshInMs: 600_000,
      refused: [],
      past: nothingPast,
    });
  });

  it("loads no key set whose every signature key is unsafe, and says which and why, without their numbers", async () => {
    const weak = generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey.export({ format: "jwk" });
    const leaked = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ format: "jwk" });
    const idp = await provider({
      "/jwks": json({
        keys: [
          { ...weak, kid: "old-1024", alg: "RS256" },
          { ...leaked, kid: "leaked", alg: "ES256", use: "sig" },
        ],
      }),
    });
    const { keys, outcome } = firstFetch({ kind: "jwks", url: `${idp.base}/jwks` });
    const failed = await outcome;
    expect(failed).toMatchObject({ ok: false });
    const error = (failed as { error: string }).error;
    expect(error).toContain("the JWKS holds no usable signature key");
    expect(error).toContain('kid "old-1024": an RSA key of 1024 bits (2048 at least)');
    expect(error).toContain('kid "leaked": the JWKS publishes its private key');
    for (const secret of [weak.n, leaked.d, leaked.x]) expect(error).not.toContain(secret);
    expect(keys.loaded()).toBe(false);
  });

  it("stops reading a key set past 1 MB, declared or not", async () => {
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const endless = await provider({
      "/jwks": (_, res) => {
        res.writeHead(200, { "content-type": "application/json" });
        let sent = 0;
        const more = () => {
          // 64 MB at most: far past the limit, and finite should the reader never stop.
          while (sent < 1024 && res.write(chunk)) sent += 1;
          if (sent < 1024) res.once("drain", more);
          else res.end();
        };
        res.on("error", () => undefined);
        more();
      },
      "/declared": (_, res) => {
        res.writeHead(200, { "content-type": "application/json", "content-length": String(8 << 20) });
        res.on("error", () => undefined);
        res.write(chunk);
      },
    });
    const a = firstFetch({ kind: "jwks", url: `${endless.base}/jwks` });
    expect(await a.outcome).toMatchObject({ ok: false });
    expect(endless.written()).toBeLessThan(16 << 20);
    const b = firstFetch({ kind: "jwks", url: `${endless.base}/declared` });
    expect(await b.outcome).toMatchObject({ ok: false });
  });

  it("stops reading a compressed key set once it inflates past 1 MB, however small it came", async () => {
    const bomb = gzipSync(Buffer.alloc(16 << 20, 0x20));
    expect(bomb.length).toBeLessThan(64 * 1024);
    const idp = await provider({
      "/jwks": (_, res) => {
        res.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip" });
        res.on("error", () => undefined);
        res.end(bomb);
      },
    });
    expect(await firstFetch({ kind: "jwks", url: `${idp.base}/jwks` }).outcome).toEqual({
      ok: false,
      attempt: 1,
      error: `${idp.base}/jwks: answered more than 1048576 bytes`,
    });
  });

  it("cuts off a discovery document that stalls, or is too large, as it does a key set", async () => {
    const idp = await provider({
      "/.well-known/openid-configuration": (_, res) => {
        res.writeHead(200, { "content-type": "application/json" });
        res.write('{"issuer": "');
      },
    });
    const quick = { ...FAST, fetchTimeoutMs: 300 };
    expect(await firstFetch({ kind: "oidc", issuerUrl: idp.base }, quick).outcome).toEqual({
      ok: false,
      attempt: 1,
      error: `${idp.base}/.well-known/openid-configuration: timed out after 300 ms`,
    });
    const large = await provider({
      "/.well-known/openid-configuration": (base, res) =>
        json({ issuer: base, jwks_uri: `${base}/jwks`, padding: " ".repeat(1 << 20) })(base, res),
    });
    expect(await firstFetch({ kind: "oidc", issuerUrl: large.base }).outcome).toEqual({
      ok: false,
      attempt: 1,
      error: `${large.base}/.well-known/openid-configuration: answered more than 1048576 bytes`,
    });
  });
});
