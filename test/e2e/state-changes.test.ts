// Every change an admin or a user makes, seen from another tollgate process on the same Redis: the
// first check sent after the change's answer, over HTTP ext_authz and gRPC ext_authz, with the denial
// cache on (as by default), is decided as the change says, never by a refusal cached before it. Run
// twice: with the other process as close to Redis as the one changed, and with its connection
// lagging (every reply 20 ms late, its announcements included), which the answer must not outrun.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { type DarkProxy, startDarkProxy } from "../support/dark-proxy.js";
import { type GrpcClients, grpcClients } from "../support/grpc-client.js";
import { type JwksServer, makeKey, signToken, startJwksServer } from "../support/jwks-server.js";
import { startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { redisUrl, testPrefix, topologyEnv } from "../support/redis.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

const AUDIENCE = "api://state-changes";
const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" };
const signer = makeKey("state-1");

// Three searches an hour for free users; everything else as built in.
const policyFile = join(mkdtempSync(join(tmpdir(), "tollgate-state-")), "policy.yaml");
writeFileSync(
  policyFile,
  DEFAULT_POLICY_YAML.replace(/(free: +\{ general: 100\/1h, +)search: 20\/1h/, "$1search: 3/1h"),
);

type Protocol = "http" | "grpc";
/** A credential in the state before a change, and the change, made on the first instance. */
type Case = [string, () => Promise<{ credential: Credential; change(): Promise<unknown> }>];
/** A request's credential: tollgate's token, an API key or a provider's token. */
type Credential = { authorization: string } | { "x-api-key": string };

let ipCount = 0;
/** A fresh client address per check: no case spends another's anonymous budget. */
const nextIp = () => {
  ipCount += 1;
  return `10.91.${(ipCount >> 8) & 255}.${ipCount & 255}`;
};

/** One instance as a proxy reaches it: its check listener and its gRPC one. */
type Instance = { proc: TollgateProcess; grpc: GrpcClients };

/** The status the client would see for GET /api/search on `instance`, over `protocol`. */
async function search(instance: Instance, protocol: Protocol, credential: Credential): Promise<number> {
  const ip = nextIp();
  if (protocol === "http") {
    const res = await fetch(`${instance.proc.checkUrl}/ext_authz/api/search`, {
      headers: { ...credential, "x-forwarded-for": ip },
    });
    await res.arrayBuffer();
    return res.status;
  }
  const reply = await instance.grpc.check({ path: "/api/search", headers: credential, source: ip });
  if ((reply.status?.code ?? 0) === 0) return 200;
  return reply.denied_response?.status?.code ?? -1;
}

/** A call of the admin API (or, given a credential's headers, the public one) that must succeed. */
async function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = admin,
) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  expect(res.status, `${method} ${path}: ${text}`).toBeLessThan(300);
  return text === "" ? {} : (JSON.parse(text) as Record<string, unknown>);
}

describe.each([
  { lag: "as close to Redis", replyDelayMs: 0, cluster: false },
  { lag: "lagging behind Redis", replyDelayMs: 20, cluster: false },
  // Announcements, acknowledgements and heartbeats are PUBLISHed on one node and heard on another.
  { lag: "on a Redis Cluster", replyDelayMs: 0, cluster: true },
])("a change made on one instance, checked on another $lag", ({ replyDelayMs, cluster }) => {
  let idp: JwksServer;
  let proxy: DarkProxy;
  let a: TollgateProcess;
  let other: Instance;

  beforeAll(async () => {
    idp = await startJwksServer([signer]);
    const redis = new URL(redisUrl());
    proxy = await startDarkProxy({ host: redis.hostname, port: Number(redis.port) });
    proxy.slowReplies(replyDelayMs, replyDelayMs);
    const store = cluster ? topologyEnv("cluster") : { REDIS_URL: redisUrl() };
    const env = {
      ...store,
      REDIS_KEY_PREFIX: testPrefix(),
      POLICY_FILE: policyFile,
      JWKS_URL: idp.jwksUrl,
      JWT_ISSUER: idp.issuer,
      JWT_AUDIENCE: AUDIENCE,
      EXTERNAL_DEFAULT_TIER: "free",
      // The cases are about what the next check decides, not how fast: at the default 100 ms, a
      // starved two-core machine (and the lagging instance's 40 ms round trip) turns that check into
      // a degraded 200 or a 503. It sets how long an instance trusts its cache unheard too.
      REDIS_TIMEOUT_MS: "1000",
    };
    let b: TollgateProcess;
    [a, b] = await Promise.all([
      startTollgate(env, { name: "state-a" }),
      startTollgate(cluster ? env : { ...env, REDIS_URL: proxy.url }, { name: "state-b" }),
    ]);
    other = { proc: b, grpc: grpcClients(b.grpcUrl) };
  });
  afterAll(async () => {
    other?.grpc.close();
    await Promise.all([a?.stop(), other?.proc.stop()]);
    await proxy?.close();
    await idp?.close();
  });

  let userCount = 0;
  const newUser = async (tier = "free") => {
    userCount += 1;
    const username = `state_${userCount}_${Math.random().toString(36).slice(2, 8)}`;
    const password = `pw-${Math.random().toString(36).slice(2)}`;
    const made = await call(a.adminUrl, "POST", "/admin/users", { username, password, tier });
    const login = async () => {
      const body = await call(a.url, "POST", "/auth/login", { username, password }, {});
      return { authorization: `Bearer ${body.access_token as string}` };
    };
    return { id: made.user_id as string, username, login };
  };
  const newKey = async (tier = "free", userId?: string) => {
    const made = await call(a.adminUrl, "POST", "/admin/api-keys", {
      name: "state",
      tier,
      ...(userId === undefined ? {} : { user_id: userId }),
    });
    return { id: made.id as string, credential: { "x-api-key": made.key as string } };
  };
  const newSubject = () => {
    const sub = `sub|${Math.random().toString(36).slice(2)}`;
    const token = signToken(signer, {
      iss: idp.issuer,
      aud: AUDIENCE,
      sub,
      exp: Math.floor(Date.now() / 1000) + 600,
    });
    return {
      path: `/admin/subjects/${encodeURIComponent(sub)}`,
      credential: { authorization: `Bearer ${token}` },
    };
  };

  /** Spends the credential's three searches on the other instance, which then holds its 429 cached. */
  const refusedThere = async (protocol: Protocol, credential: Credential) => {
    for (let i = 0; i < 3; i += 1) expect(await search(other, protocol, credential)).toBe(200);
    expect(await search(other, protocol, credential)).toBe(429);
    expect(await search(other, protocol, credential)).toBe(429);
  };

  describe.each(["http", "grpc"] as const)("over %s", (protocol) => {
    const refusedThenFreed: Case[] = [
      [
        "a user's tier raised",
        async () => {
          const user = await newUser();
          return {
            credential: await user.login(),
            change: () => call(a.adminUrl, "PUT", `/admin/users/${user.id}/tier`, { tier: "pro" }),
          };
        },
      ],
      [
        "a user's own limit raised",
        async () => {
          const user = await newUser();
          return {
            credential: await user.login(),
            change: () => call(a.adminUrl, "PUT", `/admin/users/${user.id}/limits`, { search: "10/1h" }),
          };
        },
      ],
      [
        "a user's windows cleared",
        async () => {
          const user = await newUser();
          return {
            credential: await user.login(),
            change: () => call(a.adminUrl, "DELETE", `/admin/users/${user.id}/limits`),
          };
        },
      ],
      [
        "an API key's tier raised",
        async () => {
          const key = await newKey();
          return {
            credential: key.credential,
            change: () => call(a.adminUrl, "PUT", `/admin/api-keys/${key.id}/tier`, { tier: "pro" }),
          };
        },
      ],
      [
        "an API key's own limit raised",
        async () => {
          const key = await newKey();
          return {
            credential: key.credential,
            change: () => call(a.adminUrl, "PUT", `/admin/api-keys/${key.id}/limits`, { search: "10/1h" }),
          };
        },
      ],
      [
        "an API key's windows cleared",
        async () => {
          const key = await newKey();
          return {
            credential: key.credential,
            change: () => call(a.adminUrl, "DELETE", `/admin/api-keys/${key.id}/limits`),
          };
        },
      ],
      [
        "a provider subject's tier raised",
        async () => {
          const subject = newSubject();
          return {
            credential: subject.credential,
            change: () => call(a.adminUrl, "PUT", `${subject.path}/tier`, { tier: "pro" }),
          };
        },
      ],
      [
        "a provider subject's own limit raised",
        async () => {
          const subject = newSubject();
          return {
            credential: subject.credential,
            change: () => call(a.adminUrl, "PUT", `${subject.path}/limits`, { search: "10/1h" }),
          };
        },
      ],
      [
        "a provider subject's windows cleared",
        async () => {
          const subject = newSubject();
          return {
            credential: subject.credential,
            change: () => call(a.adminUrl, "DELETE", `${subject.path}/limits`),
          };
        },
      ],
    ];

    it.each(refusedThenFreed)("allows the next request at once after %s", async (_, prepare) => {
      const { credential, change } = await prepare();
      await refusedThere(protocol, credential);
      const started = performance.now();
      await change();
      // Acknowledged by the other instance, not waited out: a change that hears no acknowledgement
      // answers only once the other's trust in its cache is over, 22 s here (docs/check.md).
      expect(performance.now() - started).toBeLessThan(4_500);
      expect(await search(other, protocol, credential)).toBe(200);
    });

    const refusedThenRevoked: Case[] = [
      [
        "the user's password changed",
        async () => {
          const user = await newUser();
          return {
            credential: await user.login(),
            change: () =>
              call(a.adminUrl, "PUT", `/admin/users/${user.id}/password`, { password: "new-password-1" }),
          };
        },
      ],
      [
        "the user deleted",
        async () => {
          const user = await newUser();
          return {
            credential: await user.login(),
            change: () => call(a.adminUrl, "DELETE", `/admin/users/${user.id}`),
          };
        },
      ],
      [
        "the user disabled",
        async () => {
          const user = await newUser();
          return {
            credential: await user.login(),
            change: () => call(a.adminUrl, "PUT", `/admin/users/${user.id}/disabled`, { disabled: true }),
          };
        },
      ],
      [
        "an admin's revoke of every session",
        async () => {
          const user = await newUser();
          return {
            credential: await user.login(),
            change: () => call(a.adminUrl, "POST", `/admin/users/${user.id}/revoke`),
          };
        },
      ],
      [
        "an admin's revoke of that session",
        async () => {
          const user = await newUser();
          const credential = await user.login();
          const { sessions } = (await call(a.adminUrl, "GET", `/admin/users/${user.id}/sessions`)) as {
            sessions: { session_id: string }[];
          };
          const sid = sessions[0]?.session_id as string;
          return {
            credential,
            change: () => call(a.adminUrl, "DELETE", `/admin/users/${user.id}/sessions/${sid}`),
          };
        },
      ],
      [
        "a logout",
        async () => {
          const user = await newUser();
          const credential = await user.login();
          return { credential, change: () => call(a.url, "POST", "/auth/logout", undefined, credential) };
        },
      ],
      [
        "a logout from every device",
        async () => {
          const user = await newUser();
          const credential = await user.login();
          const from = await user.login();
          return { credential, change: () => call(a.url, "POST", "/auth/logout-all", undefined, from) };
        },
      ],
      [
        "the session revoked from another one",
        async () => {
          const user = await newUser();
          const credential = await user.login();
          const from = await user.login();
          const { sessions } = (await call(a.url, "GET", "/auth/sessions", undefined, from)) as {
            sessions: { session_id: string; is_current: boolean }[];
          };
          const sid = sessions.find((s) => !s.is_current)?.session_id as string;
          return {
            credential,
            change: () => call(a.url, "POST", `/auth/sessions/${sid}/revoke`, undefined, from),
          };
        },
      ],
      [
        "an API key deleted",
        async () => {
          const key = await newKey();
          return {
            credential: key.credential,
            change: () => call(a.adminUrl, "DELETE", `/admin/api-keys/${key.id}`),
          };
        },
      ],
      [
        "an API key's user disabled",
        async () => {
          const user = await newUser();
          const key = await newKey("free", user.id);
          return {
            credential: key.credential,
            change: () => call(a.adminUrl, "PUT", `/admin/users/${user.id}/disabled`, { disabled: true }),
          };
        },
      ],
      [
        "an API key's user deleted",
        async () => {
          const user = await newUser();
          const key = await newKey("free", user.id);
          return {
            credential: key.credential,
            change: () => call(a.adminUrl, "DELETE", `/admin/users/${user.id}`),
          };
        },
      ],
      [
        "a provider subject blocked",
        async () => {
          const subject = newSubject();
          return {
            credential: subject.credential,
            change: () => call(a.adminUrl, "PUT", `${subject.path}/blocked`),
          };
        },
      ],
    ];

    it.each(refusedThenRevoked)("refuses the next request 401 at once after %s", async (_, prepare) => {
      const { credential, change } = await prepare();
      await refusedThere(protocol, credential);
      await change();
      expect(await search(other, protocol, credential)).toBe(401);
    });

    const allowedThenShrunk: Case[] = [
      [
        "a user's tier lowered",
        async () => {
          const user = await newUser("pro");
          return {
            credential: await user.login(),
            change: () => call(a.adminUrl, "PUT", `/admin/users/${user.id}/tier`, { tier: "free" }),
          };
        },
      ],
      [
        "a user's own limit lowered",
        async () => {
          const user = await newUser("pro");
          return {
            credential: await user.login(),
            change: () => call(a.adminUrl, "PUT", `/admin/users/${user.id}/limits`, { search: "3/1h" }),
          };
        },
      ],
      [
        "an API key's tier lowered",
        async () => {
          const key = await newKey("pro");
          return {
            credential: key.credential,
            change: () => call(a.adminUrl, "PUT", `/admin/api-keys/${key.id}/tier`, { tier: "free" }),
          };
        },
      ],
      [
        "a provider subject's tier lowered",
        async () => {
          const subject = newSubject();
          await call(a.adminUrl, "PUT", `${subject.path}/tier`, { tier: "pro" });
          return {
            credential: subject.credential,
            change: () => call(a.adminUrl, "PUT", `${subject.path}/tier`, { tier: "free" }),
          };
        },
      ],
    ];

    it.each(allowedThenShrunk)(
      "applies the smaller limit to the next request after %s",
      async (_, prepare) => {
        const { credential, change } = await prepare();
        for (let i = 0; i < 4; i += 1) expect(await search(other, protocol, credential)).toBe(200);
        await change();
        expect(await search(other, protocol, credential)).toBe(429);
      },
    );

    it("accepts a provider subject again on the next request once unblocked", async () => {
      const subject = newSubject();
      await call(a.adminUrl, "PUT", `${subject.path}/blocked`);
      expect(await search(other, protocol, subject.credential)).toBe(401);
      await call(a.adminUrl, "DELETE", `${subject.path}/blocked`);
      expect(await search(other, protocol, subject.credential)).toBe(200);
    });

    it("accepts an API key again on the next request once its user is enabled again", async () => {
      const user = await newUser();
      const key = await newKey("free", user.id);
      expect(await search(other, protocol, key.credential)).toBe(200);
      await call(a.adminUrl, "PUT", `/admin/users/${user.id}/disabled`, { disabled: true });
      expect(await search(other, protocol, key.credential)).toBe(401);
      await call(a.adminUrl, "PUT", `/admin/users/${user.id}/disabled`, { disabled: false });
      expect(await search(other, protocol, key.credential)).toBe(200);
    });
  });
});
