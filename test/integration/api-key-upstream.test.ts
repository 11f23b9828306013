// An API key is tollgate's to read, never the upstream's: an allow asks Envoy to drop the headers
// that carried one (x-envoy-auth-headers-to-remove over HTTP, headers_to_remove over gRPC), unless
// API_KEY_FORWARD=true. nginx drops them in its configuration (test/e2e/nginx.test.ts).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { apiKeyHeaders } from "../../src/frontends/api-key-headers.js";
import { type GrpcClients, grpcClients } from "../support/grpc-client.js";
import { send } from "../support/http-client.mjs";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";

const REMOVE = "x-envoy-auth-headers-to-remove";

describe("which headers carried an API key", () => {
  const of = apiKeyHeaders("x-client-key");
  it.each([
    [{ authorization: undefined, apiKey: "tg_k" }, ["x-client-key"]],
    [{ authorization: "ApiKey tg_k", apiKey: undefined }, ["authorization"]],
    [{ authorization: "APIKEY tg_k", apiKey: undefined }, ["authorization"]],
    [{ authorization: "apikey tg_k", apiKey: "tg_other" }, ["x-client-key", "authorization"]],
    // A Bearer token wins over the key header, which is a secret all the same.
    [{ authorization: "Bearer a.b.c", apiKey: "tg_k" }, ["x-client-key"]],
    [{ authorization: "Basic dTpw", apiKey: "tg_k" }, ["x-client-key"]],
    [{ authorization: "Bearer a.b.c", apiKey: undefined }, undefined],
    [{ authorization: "Basic dTpw", apiKey: "" }, undefined],
    [{ authorization: "ApiKeys tg_k", apiKey: undefined }, undefined],
    // A tab after the scheme: tollgate reads it as its scheme (a malformed key), so it goes too.
    [{ authorization: "ApiKey\ttg_k", apiKey: "tg_other" }, ["x-client-key", "authorization"]],
    [{ authorization: "apikey\ttg_k", apiKey: undefined }, ["authorization"]],
    [{ authorization: "ApiKey", apiKey: undefined }, undefined],
    [{ authorization: undefined, apiKey: undefined }, undefined],
  ])("%o: %o", (facts, names) => {
    const removed = of(facts);
    expect(removed?.names).toEqual(names);
    expect(removed?.value).toBe(names?.join(", "));
  });
});

describe.each([
  ["by default", {}, true],
  ["with API_KEY_FORWARD=true", { API_KEY_FORWARD: "true" }, false],
] as const)("an allowed check's API key headers, %s", (_name, env, dropped) => {
  let tollgate: InProcessOnRedis;
  let grpc: GrpcClients;
  let key: string;
  let token: string;

  beforeAll(async () => {
    tollgate = await startInProcess({ env });
    grpc = grpcClients(tollgate.grpcUrl);
    const made = await tollgate.admin<{ id: string; key: string }>("POST", "/admin/api-keys", {
      token: tollgate.adminToken,
      json: { name: "upstream", tier: "pro" },
    });
    expect(made.status).toBe(201);
    ({ key } = made.body);
    token = (await tollgate.loginOk("alice", "secret")).access_token;
  });

  afterAll(async () => {
    grpc?.close();
    await tollgate?.close();
  });

  const httpCheck = (headers: Record<string, string>, protocol: "envoy" | "nginx" = "envoy") =>
    protocol === "envoy"
      ? send(`${tollgate.checkUrl}/ext_authz/api/products`, { headers })
      : send(`${tollgate.checkUrl}/nginx/auth`, {
          headers: { ...headers, "x-original-method": "GET", "x-original-uri": "/api/products" },
        });

  it.each([
    [{ "x-api-key": "KEY" }, "x-api-key"],
    [{ authorization: "ApiKey KEY" }, "authorization"],
    [{ authorization: "Basic dTpw", "x-api-key": "KEY" }, "x-api-key"],
    [{ authorization: "Bearer TOKEN", "x-api-key": "tg_not_read" }, "x-api-key"],
    [{ authorization: "Bearer TOKEN" }, undefined],
  ])("Envoy over HTTP and gRPC, %o: removes %s", async (template, named) => {
    const headers = Object.fromEntries(
      Object.entries(template).map(([name, value]) => [
        name,
        value.replace("KEY", key).replace("TOKEN", token),
      ]),
    );
    const allowed = await httpCheck(headers);
    expect(allowed.status, allowed.text).toBe(200);
    expect(allowed.header(REMOVE)).toBe(dropped ? named : undefined);

    const grpcAnswer = await grpc.check({ path: "/api/products", headers, source: "10.79.0.1" });
    expect(grpcAnswer.status?.code ?? 0).toBe(0);
    const removed = grpcAnswer.ok_response?.headers_to_remove ?? [];
    // Identity headers tollgate does not set are removed too (an API key has no session).
    expect(removed.filter((name) => !name.startsWith("x-user-") && name !== "x-session-id")).toEqual(
      dropped && named !== undefined ? [named] : [],
    );
  });

  it("asks nothing of nginx (its configuration drops the key) and nothing on a denial", async () => {
    const viaNginx = await httpCheck({ "x-api-key": key }, "nginx");
    expect(viaNginx.status).toBe(200);
    expect(viaNginx.header(REMOVE)).toBeUndefined();
    const unknown = await httpCheck({ "x-api-key": `tg_${"A".repeat(43)}` });
    expect(unknown.status).toBe(401);
    expect(unknown.header(REMOVE)).toBeUndefined();
    const refused = await grpc.check({
      path: "/api/products",
      headers: { "x-api-key": `tg_${"A".repeat(43)}` },
      source: "10.79.0.2",
    });
    expect(refused.status?.code).toBe(16);
    expect(refused.ok_response).toBeUndefined();
  });
});
