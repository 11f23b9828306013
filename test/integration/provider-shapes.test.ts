// Tokens shaped as real providers issue them, through the settings docs/identity.md gives for each
// and the whole check (discovery, keys, credential, decision): Okta's groups with Everyone among
// them, Keycloak's roles nested in realm_access, Entra ID's two audiences, Cognito's access tokens
// without aud and its ID tokens. On the memory store: what is checked here is what the token names.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryStore } from "../../src/store/store.js";
import { type InProcess, startInProcess } from "../support/in-process.js";
import {
  type JwksServer,
  makeKey,
  signToken,
  startJwksServer,
  type TestKey,
} from "../support/jwks-server.js";

let idp: JwksServer;
let key: TestKey;
const running: InProcess[] = [];
let ipCount = 0;

beforeAll(async () => {
  key = makeKey("shape-1");
  idp = await startJwksServer([key]);
});
afterAll(async () => {
  await Promise.all(running.map((r) => r.close()));
  await idp?.close();
});

/** A tollgate whose provider is found through discovery, with the provider's settings of the docs. */
async function tollgateWith(env: Record<string, string>): Promise<InProcess> {
  const started = await startInProcess({
    store: createMemoryStore(),
    demoUsers: false,
    env: { LOG_LEVEL: "silent", OIDC_ISSUER: idp.issuer, JWT_ISSUER: idp.issuer, ...env },
  });
  running.push(started);
  await started.tollgate.providerKeys?.ready();
  return started;
}

async function check(
  tollgate: InProcess,
  payload: Record<string, unknown>,
  header: Record<string, unknown> = {},
) {
  ipCount += 1;
  const now = Math.floor(Date.now() / 1000);
  const token = signToken(
    key,
    { iss: idp.issuer, sub: `shape-${randomBytes(4).toString("hex")}`, iat: now, exp: now + 300, ...payload },
    header,
  );
  const res = await fetch(`${tollgate.checkUrl}/ext_authz/api/search`, {
    headers: {
      authorization: `Bearer ${token}`,
      "x-forwarded-for": `198.19.${ipCount >> 8}.${ipCount & 255}`,
    },
  });
  return { status: res.status, tier: res.headers.get("x-user-tier"), body: await res.text() };
}

describe("provider tokens as real providers shape them, with the documented settings", () => {
  it("Okta: a pro customer's groups name Everyone too, and the map's order gives pro", async () => {
    const okta = await tollgateWith({
      JWT_AUDIENCE: "api://default",
      JWT_TIER_CLAIM: "groups",
      JWT_TIER_MAP: "Enterprise-Customers=enterprise,Pro-Customers=pro",
    });
    const base = { aud: "api://default", cid: "0oa1okta", scp: ["openid"], ver: 1 };
    for (const [groups, tier] of [
      [["Everyone", "Pro-Customers"], "pro"],
      [["Pro-Customers", "Everyone", "Enterprise-Customers"], "enterprise"],
      [["Everyone"], "free"],
    ] as const) {
      const answer = await check(okta, { ...base, groups }, { typ: undefined });
      expect(answer.status, answer.body).toBe(200);
      expect(answer.tier, JSON.stringify(groups)).toBe(tier);
    }
  });

  it("Keycloak: the tier from realm_access.roles, beside the roles every user holds", async () => {
    const keycloak = await tollgateWith({
      JWT_AUDIENCE: "tollgate",
      JWT_TIER_CLAIM: "realm_access.roles",
      JWT_TIER_MAP: "corporate=enterprise,premium=pro",
    });
    const answer = await check(keycloak, {
      aud: ["tollgate", "account"],
      azp: "web",
      typ: "Bearer",
      realm_access: { roles: ["offline_access", "premium", "default-roles-acme", "uma_authorization"] },
    });
    expect(answer.status, answer.body).toBe(200);
    expect(answer.tier).toBe("pro");
  });

  it("Entra ID v1: an aud of either the App ID URI or the client id, both in JWT_AUDIENCE", async () => {
    const clientId = "6e74172b-be56-4843-9ff4-e66a39bb12e3";
    const entra = await tollgateWith({ JWT_AUDIENCE: `api://tollgate,${clientId}` });
    for (const aud of ["api://tollgate", clientId]) {
      const answer = await check(entra, { aud, ver: "1.0", oid: "0f1e2d3c" }, { x5t: key.kid });
      expect(answer.status, `${aud}: ${answer.body}`).toBe(200);
    }
    expect((await check(entra, { aud: "https://graph.microsoft.com" })).status).toBe(401);
  });

  it("Cognito: an access token with client_id and no aud passes, its ID token is refused", async () => {
    const cognito = await tollgateWith({
      JWT_AUDIENCE: "5kq2c1cognitoclient",
      JWT_TIER_CLAIM: "cognito:groups",
    });
    const access = await check(
      cognito,
      {
        client_id: "5kq2c1cognitoclient",
        token_use: "access",
        scope: "aws.cognito.signin.user.admin",
        "cognito:groups": ["pro"],
      },
      { typ: undefined },
    );
    expect(access.status, access.body).toBe(200);
    expect(access.tier).toBe("pro");
    const id = await check(cognito, { aud: "5kq2c1cognitoclient", token_use: "id", email: "a@example.com" });
    expect(id.status).toBe(401);
    expect(id.body).toContain("token is not an access token");
  });
});
