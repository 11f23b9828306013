// Differential test of request targets: through a real nginx in front of the real upstream and
// tollgate, every request is refused at the check or served by the route whose category was charged.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import type { EnvoyHarness } from "../support/envoy-harness.js";
import { login } from "../support/http-client.mjs";
import type { Nginx, TollgateProcess } from "../support/processes.mjs";
import { type RawReply, rawRequest } from "../support/raw-http.js";
import { type Stack, startStack } from "../support/stack.js";

let tollgate: TollgateProcess;
let nginx: Nginx;
let envoy: EnvoyHarness;
let stack: Stack;
let token: string;

beforeAll(async () => {
  // The default routes with limits no run can spend, so every answer shows a route, never a 429.
  const policy = DEFAULT_POLICY_YAML.replace(/\d+\/1h|10\/15m/g, "1000000/1h");
  stack = await startStack({ policy });
  ({ tollgate, nginx, envoy } = stack);
  token = (await login(tollgate.url, "ent_carol")).access_token;
});

afterAll(() => stack?.stop());

/** Sends the target byte for byte (no client-side URL parsing), with a token and an empty JSON body. */
function sendRaw(base: string, method: string, target: string): Promise<RawReply> {
  return rawRequest(
    base,
    `${method} ${target} HTTP/1.1\r\nHost: tollgate.test\r\nAuthorization: Bearer ${token}\r\n` +
      "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
  );
}

const header = (reply: RawReply, name: string): string | undefined =>
  reply.headers.find(([n]) => n === name)?.[1];

/**
 * Which handler answered, told from its body: each upstream route and the login handler answer an
 * empty-bodied request in their own way. "none" is a handler-less 404; "refused" never got past the
 * proxy or the check.
 */
type Served = "products" | "search" | "orders" | "orders-list" | "login" | "none" | "refused" | "other";

function servedBy(reply: RawReply): Served {
  if (reply.status === 0 || reply.status === 400 || reply.status === 414) {
    // A proxy or check refusal; an upstream or login handler never answers 400 without its own words.
    if (!/q is required|items must|JSON body with string fields/.test(reply.body)) return "refused";
  }
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(reply.body) as Record<string, unknown>;
  } catch {
    return "other";
  }
  if (Array.isArray(body.products)) return "products";
  if (Array.isArray(body.results) || /^q (is required|must)/.test(String(body.message))) return "search";
  if (Array.isArray(body.orders)) return "orders-list";
  if (body.error === "invalid_order" || body.error === "unsupported_media_type" || "order_id" in body) {
    return "orders";
  }
  if (/JSON body with string fields/.test(String(body.message))) return "login";
  if (body.error === "not_found") return "none";
  return "other";
}

/** The category each handler's requests must be charged to under the default routes. */
const CATEGORY: Partial<Record<Served, string>> = {
  products: "general",
  "orders-list": "general",
  search: "search",
  orders: "orders",
  login: "login",
};

/** The property for one request: refused, or charged to the category of the handler that served it. */
async function judge(base: string, method: string, target: string): Promise<Served> {
  const reply = await sendRaw(base, method, target);
  const served = servedBy(reply);
  const charged = header(reply, "x-ratelimit-resource");
  const what = `${method} ${JSON.stringify(target)} → ${reply.status} charged ${charged} served ${served}: ${reply.body.slice(0, 160)}`;
  const expected = CATEGORY[served];
  if (expected !== undefined) expect(charged, what).toBe(expected);
  if (served === "refused" && reply.status === 400) {
    expect(JSON.parse(reply.body), what).toMatchObject({ error: "bad_request" });
  }
  expect(reply.status, what).toBeLessThan(500);
  return served;
}

/** The cases an outside review used to escape the search, orders and login limits behind nginx. */
const REVIEW_CASES: Array<[string, string]> = [
  ["GET", "/api/search\\?q=lamp#"],
  ["POST", "/api/orders\\#"],
  ["POST", "/auth/login\\#"],
  ["GET", "/api/search%5C?q=lamp"],
  ["GET", "/api/search%5c?q=lamp"],
  ["GET", "/api/search#?q=lamp"],
  ["GET", "/api/search;x?q=lamp"],
  ["GET", "/api/x/..%2Fsearch?q=lamp"],
  ["GET", "/api%2Fsearch?q=lamp"],
  ["GET", "/api/%2e%2e/api/search?q=lamp"],
  ["GET", "/api/search%00?q=lamp"],
];

describe("request targets through nginx", () => {
  it("tells each upstream route and the login handler apart (the oracle of the property below)", async () => {
    expect(await judge(nginx.url, "GET", "/api/products")).toBe("products");
    expect(await judge(nginx.url, "GET", "/api/search?q=lamp")).toBe("search");
    expect(await judge(nginx.url, "GET", "/api/Search/?q=lamp")).toBe("search");
    // nginx turns an absolute-form target into the same path for the check and the upstream.
    expect(await judge(nginx.url, "GET", "http://tollgate.test/api/search?q=lamp")).toBe("search");
    expect(await judge(nginx.url, "POST", "/api/orders")).toBe("orders");
    expect(await judge(nginx.url, "GET", "/api/orders")).toBe("orders-list");
    expect(await judge(nginx.url, "POST", "/auth/login")).toBe("login");
    expect(await judge(nginx.url, "GET", "/api/nothing")).toBe("none");
  });

  it.each(REVIEW_CASES)(
    "refuses %s %s with 400 JSON at the check, never serving it",
    async (method, target) => {
      const reply = await sendRaw(nginx.url, method, target);
      expect(reply.status, reply.body).toBe(400);
      expect(JSON.parse(reply.body)).toMatchObject({ error: "bad_request" });
      expect(header(reply, "x-ratelimit-resource")).toBeUndefined();
    },
  );

  it("serves every generated target by the route whose category was charged, or refuses it", async () => {
    // Real routes, spelled and broken in hostile ways: pieces inserted at random places, and case flips.
    const base = fc.constantFrom(
      "/api/search?q=lamp",
      "/api/orders",
      "/api/products",
      "/auth/login",
      "/api/orders?x=1",
    );
    const piece = fc.constantFrom(
      "\\",
      "#",
      ";",
      "%",
      ".",
      "..",
      "/",
      "//",
      "/./",
      "/../",
      "/x/../",
      "%2f",
      "%2F",
      "%5c",
      "%5C",
      "%2e",
      "%2E%2e",
      "%00",
      "%09",
      "%1f",
      "%7f",
      "%20",
      "%23",
      "%3f",
      "%3B",
      "%25",
      "%25%32%66",
      "%61",
      "%73",
      "%C5%BF",
      "%EF%BD%93",
      "%C3%A9",
      "%FF",
      "?",
      "=",
      "~",
      ":",
      "@",
      "http://tollgate.test",
    );
    const edit = fc.tuple(fc.nat(), fc.oneof(piece, fc.constant("<upper>")));
    const target = fc.tuple(base, fc.array(edit, { minLength: 0, maxLength: 3 })).map(([start, edits]) => {
      let t: string = start;
      for (const [at, what] of edits) {
        const i = at % (t.length + 1);
        t =
          what === "<upper>"
            ? t.slice(0, i) + t.slice(i, i + 3).toUpperCase() + t.slice(i + 3)
            : t.slice(0, i) + what + t.slice(i);
      }
      return t;
    });
    const served = new Map<Served, number>();
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("GET", "POST"), target, async (method, path) => {
        const what = await judge(nginx.url, method, path);
        served.set(what, (served.get(what) ?? 0) + 1);
      }),
      {
        numRuns: 300,
        examples: [
          ["GET", "/api/search\\?q=lamp#"],
          ["POST", "/api/orders\\#"],
          ["POST", "/auth/login\\#"],
        ],
      },
    );
    // The run reached real handlers, not only refusals, or it proved nothing.
    expect(served.get("refused") ?? 0).toBeGreaterThan(0);
    for (const handler of ["search", "orders", "login"] as const) {
      expect(served.get(handler) ?? 0, JSON.stringify([...served])).toBeGreaterThan(0);
    }
  }, 120_000);

  // Symfony and Laravel serve POST /api/search?_method=GET by the GET search route: charged as a POST
  // (the default route, general), it would have escaped the search limit.
  it.each([
    "/api/search?q=lamp&_method=GET",
    "/api/search?%5Fmethod=GET&q=lamp",
    "/api/search?.method=GET&q=lamp",
  ])("refuses POST %s with 400 JSON, through nginx and the Envoy harness", async (target) => {
    for (const base of [nginx.url, envoy.url]) {
      const reply = await sendRaw(base, "POST", target);
      expect(reply.status, reply.body).toBe(400);
      expect(JSON.parse(reply.body)).toMatchObject({ error: "bad_request" });
      expect(header(reply, "x-ratelimit-resource")).toBeUndefined();
    }
  });

  // Rails, Spring MVC and Django REST framework serve /api/search.json by the search route: charged
  // by the default route (general), it would have escaped the search limit.
  it("charges a path with a format suffix as its route, through nginx and the Envoy harness", async () => {
    for (const base of [nginx.url, envoy.url]) {
      for (const target of ["/api/search.json?q=lamp", "/api/Search.XML?q=lamp"]) {
        const reply = await sendRaw(base, "GET", target);
        expect(header(reply, "x-ratelimit-resource"), `${base} ${target}: ${reply.body}`).toBe("search");
      }
      expect(header(await sendRaw(base, "POST", "/api/orders.json"), "x-ratelimit-resource")).toBe("orders");
    }
  });

  it("answers an over-long target with 414 JSON, not a 503", async () => {
    for (const length of [9_000, 70_000]) {
      const reply = await sendRaw(nginx.url, "GET", `/api/search?q=${"a".repeat(length)}`);
      expect(reply.status, `${length}: ${reply.body}`).toBe(414);
      expect(JSON.parse(reply.body)).toMatchObject({ error: "uri_too_long" });
    }
  });

  // Each value below fits one of nginx's header buffers; together they were more than the check
  // listener takes, and its 431 reached the client as auth_request's 503 "unavailable", uncounted.
  it.each([
    ["a long target and a long X-Forwarded-For", 40_000, { "X-Forwarded-For": 40_000 }],
    ["a long token and a long API key", 0, { Authorization: 40_000, "X-Api-Key": 40_000 }],
    ["a long target and a long tracestate", 30_000, { tracestate: 36_000 }],
    [
      "four headers the check reads",
      16_000,
      { "X-Forwarded-For": 16_000, traceparent: 16_000, tracestate: 16_000 },
    ],
  ])("answers %s, too large together, with 4xx JSON, never a 503", async (_, query, headers) => {
    const lines = Object.entries(headers)
      .map(
        ([name, length]) => `${name}: ${name === "Authorization" ? "Bearer " : ""}${"a".repeat(length)}\r\n`,
      )
      .join("");
    const reply = await rawRequest(
      nginx.url,
      `GET /api/search?q=${"a".repeat(query)} HTTP/1.1\r\nHost: tollgate.test\r\n${lines}Connection: close\r\n\r\n`,
    );
    expect(reply.status, reply.body).toBeGreaterThanOrEqual(400);
    expect(reply.status, reply.body).toBeLessThan(500);
    expect(JSON.parse(reply.body)).toHaveProperty("error");
    expect(nginx.errorLog().match(/auth request unexpected status: \d+/g) ?? []).toEqual([]);
  });
});

describe("request targets through the Envoy harness", () => {
  it.each(REVIEW_CASES.filter(([, t]) => t.startsWith("/")))(
    "refuses %s %s with 400 JSON, never serving it",
    async (method, target) => {
      const reply = await sendRaw(envoy.url, method, target);
      expect(reply.status, reply.body).toBe(400);
      expect(servedBy(reply)).toBe("refused");
    },
  );

  it("refuses an ambiguous target on the check listener itself, for both protocols", async () => {
    const direct = await rawRequest(
      tollgate.checkUrl,
      "GET /ext_authz/api/search%5C HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    expect(direct.status).toBe(400);
    expect(JSON.parse(direct.body)).toMatchObject({ error: "bad_request" });
    const viaNginx = await rawRequest(
      tollgate.checkUrl,
      "GET /nginx/auth HTTP/1.1\r\nHost: x\r\nX-Original-Method: GET\r\n" +
        "X-Original-URI: /api/search\\?q=lamp#\r\nConnection: close\r\n\r\n",
    );
    // auth_request passes 401 and 403 only: the real status travels in X-Authz-Status.
    expect(viaNginx.status).toBe(403);
    expect(header(viaNginx, "x-authz-status")).toBe("400");
    expect(JSON.parse(header(viaNginx, "x-authz-body") ?? "")).toMatchObject({ error: "bad_request" });
  });
});
