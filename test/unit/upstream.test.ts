// Behaviour of the demo upstream app, driven over real HTTP on an ephemeral port.
import { once } from "node:events";
import type { AddressInfo } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import type { Product, UpstreamOptions } from "../../upstream/app.js";
import { CATALOGUE, createUpstreamApp } from "../../upstream/app.js";

type Upstream = { url: string; close: () => Promise<void> };
const started: Upstream[] = [];

async function startUpstream(options?: UpstreamOptions): Promise<Upstream> {
  const server = createUpstreamApp(options).listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  const upstream = {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
  started.push(upstream);
  return upstream;
}

afterAll(async () => {
  await Promise.all(started.map((upstream) => upstream.close()));
});

const shared = await startUpstream({ now: () => new Date("2030-01-02T03:04:05.000Z") });

function as(user: string, tier?: string): Record<string, string> {
  return tier === undefined ? { "x-user-id": user } : { "x-user-id": user, "x-user-tier": tier };
}

// The reply shapes the app promises; declared here rather than imported so the test pins the contract.
type User = { id: string; tier: string | null };
type ProductsReply = { products: Product[]; total: number; limit: number; offset: number; user: User };
type SearchReply = { query: string; results: Product[]; total: number; user: User };
type OrderReply = {
  order_id: string;
  status: string;
  user_id: string;
  items: { product_id: number; name: string; quantity: number; unit_price: number; line_total: number }[];
  total: number;
  created_at: string;
};
type OrdersReply = { orders: OrderReply[]; total: number; user: User };
type ErrorReply = { error: string; message: string };
type Reply<T> = { status: number; type: string | null; body: T };

async function reply<T>(res: globalThis.Response): Promise<Reply<T>> {
  return { status: res.status, type: res.headers.get("content-type"), body: (await res.json()) as T };
}

async function get<T = ErrorReply>(path: string, headers: Record<string, string> = {}, base = shared.url) {
  return reply<T>(await fetch(`${base}${path}`, { headers }));
}

async function post<T = OrderReply>(
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
  base = shared.url,
) {
  const res = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return reply<T>(res);
}

function expectError(res: Reply<unknown>, status: number, code: string) {
  expect(res.status).toBe(status);
  expect(res.type).toMatch(/^application\/json/);
  expect(res.body).toEqual({ error: code, message: expect.any(String) });
  expect((res.body as ErrorReply).message).not.toMatch(/\n\s+at /);
}

describe("health", () => {
  it("answers ok without any identity headers", async () => {
    const res = await get("/health");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ok" });
  });
});

describe("identity", () => {
  it("answers 401 JSON when x-user-id is missing", async () => {
    expectError(await get("/api/products"), 401, "unauthorized");
  });

  it("treats the empty x-user-id tollgate sends for anonymous callers as missing", async () => {
    expectError(await get("/api/products", { "x-user-id": "" }), 401, "unauthorized");
    expectError(
      await post("/api/orders", { items: [{ product_id: 1, quantity: 1 }] }, { "x-user-id": "  " }),
      401,
      "unauthorized",
    );
  });

  it("echoes the caller's id and tier, with a null tier when none is sent", async () => {
    expect((await get<ProductsReply>("/api/products", as("u-echo", "pro"))).body.user).toEqual({
      id: "u-echo",
      tier: "pro",
    });
    expect((await get<SearchReply>("/api/search?q=lamp", as("u-echo"))).body.user).toEqual({
      id: "u-echo",
      tier: null,
    });
  });
});

describe("GET /api/products", () => {
  it("returns the first 20 products by default with the catalogue total", async () => {
    const res = await get<ProductsReply>("/api/products", as("u-products"));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ total: CATALOGUE.length, limit: 20, offset: 0 });
    expect(res.body.products).toHaveLength(20);
    expect(res.body.products[0]).toEqual({
      id: 1,
      name: expect.any(String),
      price: expect.any(Number),
      category: expect.any(String),
    });
  });

  it("pages with limit and offset and returns a short last page", async () => {
    const res = await get<ProductsReply>("/api/products?limit=5&offset=18", as("u-products"));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ limit: 5, offset: 18, total: CATALOGUE.length });
    expect(res.body.products.map((p) => p.id)).toEqual([19, 20]);
  });

  it("returns an empty page when offset is past the end", async () => {
    const res = await get<ProductsReply>("/api/products?offset=500", as("u-products"));
    expect(res.status).toBe(200);
    expect(res.body.products).toEqual([]);
  });

  it.each([
    "limit=0",
    "limit=101",
    "limit=abc",
    "limit=1.5",
    "limit=-1",
    "limit=",
    "limit=1&limit=2",
    "offset=-1",
    "offset=x",
    "offset=1e3",
  ])("answers 400 for the bad paging parameter %s", async (query) => {
    expectError(await get(`/api/products?${query}`, as("u-products")), 400, "invalid_query");
  });
});

describe("GET /api/search", () => {
  it("matches product names case-insensitively", async () => {
    const res = await get<SearchReply>("/api/search?q=KEYboard", as("u-search"));
    expect(res.status).toBe(200);
    expect(res.body.query).toBe("KEYboard");
    expect(res.body.results.map((p) => p.id)).toEqual([1]);
    expect(res.body.total).toBe(1);
  });

  it("matches categories", async () => {
    const res = await get<SearchReply>("/api/search?q=Books", as("u-search"));
    const books = CATALOGUE.filter((p) => p.category === "books");
    expect(books.length).toBeGreaterThan(1);
    expect(res.body.results).toEqual(books);
    expect(res.body.total).toBe(books.length);
  });

  it("returns an empty result list when nothing matches", async () => {
    const res = await get<SearchReply>("/api/search?q=submarine", as("u-search"));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ query: "submarine", results: [], total: 0 });
  });

  it("accepts a query of exactly 200 characters", async () => {
    expect((await get<SearchReply>(`/api/search?q=${"a".repeat(200)}`, as("u-search"))).status).toBe(200);
  });

  it.each([
    ["missing", ""],
    ["empty", "?q="],
    ["blank", "?q=%20%20"],
    ["repeated", "?q=a&q=b"],
    ["longer than 200 characters", `?q=${"a".repeat(201)}`],
  ])("answers 400 when q is %s", async (_label, query) => {
    expectError(await get(`/api/search${query}`, as("u-search")), 400, "invalid_query");
  });
});

describe("POST /api/orders", () => {
  it("creates an order with priced lines and a total, owned by the caller", async () => {
    const [first, second] = CATALOGUE;
    if (first === undefined || second === undefined) throw new Error("catalogue too small");
    const res = await post(
      "/api/orders",
      {
        items: [
          { product_id: first.id, quantity: 2 },
          { product_id: second.id, quantity: 1 },
        ],
      },
      as("u-create", "free"),
    );
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      status: "created",
      user_id: "u-create",
      created_at: "2030-01-02T03:04:05.000Z",
      total: first.price * 2 + second.price,
      items: [
        {
          product_id: first.id,
          name: first.name,
          quantity: 2,
          unit_price: first.price,
          line_total: first.price * 2,
        },
        {
          product_id: second.id,
          name: second.name,
          quantity: 1,
          unit_price: second.price,
          line_total: second.price,
        },
      ],
    });
    expect(res.body.order_id).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("gives every order a distinct id", async () => {
    const body = { items: [{ product_id: 3, quantity: 1 }] };
    const a = await post("/api/orders", body, as("u-ids"));
    const b = await post("/api/orders", body, as("u-ids"));
    expect(a.body.order_id).not.toBe(b.body.order_id);
  });

  it("accepts 50 items and quantities of 1 and 100", async () => {
    const items = Array.from({ length: 50 }, (_, i) => ({
      product_id: (i % 20) + 1,
      quantity: i % 2 ? 1 : 100,
    }));
    expect((await post("/api/orders", { items }, as("u-bounds"))).status).toBe(201);
  });

  it.each([
    ["no items field", {}],
    ["an empty item list", { items: [] }],
    ["items that is not a list", { items: { product_id: 1, quantity: 1 } }],
    ["more than 50 items", { items: Array.from({ length: 51 }, () => ({ product_id: 1, quantity: 1 })) }],
    ["an item that is not an object", { items: [null] }],
    ["a string product_id", { items: [{ product_id: "1", quantity: 1 }] }],
    ["a quantity of 0", { items: [{ product_id: 1, quantity: 0 }] }],
    ["a quantity of 101", { items: [{ product_id: 1, quantity: 101 }] }],
    ["a fractional quantity", { items: [{ product_id: 1, quantity: 1.5 }] }],
    ["a string quantity", { items: [{ product_id: 1, quantity: "2" }] }],
    ["a missing quantity", { items: [{ product_id: 1 }] }],
    ["a body that is a JSON array", [{ product_id: 1, quantity: 1 }]],
  ])("answers 400 invalid_order for %s", async (_label, body) => {
    expectError(await post("/api/orders", body, as("u-bad")), 400, "invalid_order");
  });

  it("answers 400 unknown_product for a product id not in the catalogue", async () => {
    const res = await post<ErrorReply>(
      "/api/orders",
      { items: [{ product_id: 999, quantity: 1 }] },
      as("u-bad"),
    );
    expectError(res, 400, "unknown_product");
    expect(res.body.message).toContain("999");
  });

  it("answers 400 JSON, not a stack trace, for malformed JSON", async () => {
    expectError(await post("/api/orders", '{"items": [', as("u-bad")), 400, "invalid_json");
  });

  it("answers 413 JSON for a body over 16kb", async () => {
    const body = JSON.stringify({ items: [], padding: "x".repeat(17 * 1024) });
    expectError(await post("/api/orders", body, as("u-bad")), 413, "payload_too_large");
  });

  it("answers 415 JSON for a body that is not application/json", async () => {
    const res = await post("/api/orders", "items=1", { ...as("u-bad"), "content-type": "text/plain" });
    expectError(res, 415, "unsupported_media_type");
  });

  it("does not record rejected orders", async () => {
    await post("/api/orders", { items: [{ product_id: 999, quantity: 1 }] }, as("u-rejected"));
    expect((await get<OrdersReply>("/api/orders", as("u-rejected"))).body).toMatchObject({
      orders: [],
      total: 0,
    });
  });
});

describe("GET /api/orders", () => {
  it("lists only the caller's own orders, oldest first", async () => {
    const alice1 = await post("/api/orders", { items: [{ product_id: 1, quantity: 1 }] }, as("alice"));
    await post("/api/orders", { items: [{ product_id: 2, quantity: 1 }] }, as("bob"));
    const alice2 = await post("/api/orders", { items: [{ product_id: 3, quantity: 1 }] }, as("alice"));

    const alice = await get<OrdersReply>("/api/orders", as("alice"));
    expect(alice.status).toBe(200);
    expect(alice.body.total).toBe(2);
    expect(alice.body.orders.map((o) => o.order_id)).toEqual([alice1.body.order_id, alice2.body.order_id]);
    expect(alice.body.orders.every((o) => o.user_id === "alice")).toBe(true);

    const bob = await get<OrdersReply>("/api/orders", as("bob"));
    expect(bob.body.orders.map((o) => o.user_id)).toEqual(["bob"]);

    expect((await get<OrdersReply>("/api/orders", as("carol"))).body).toMatchObject({ orders: [], total: 0 });
  });

  it("keeps only the newest orders per user once the per-user cap is reached", async () => {
    const { url } = await startUpstream({ maxOrdersPerUser: 2 });
    const ids: string[] = [];
    for (const quantity of [1, 2, 3]) {
      const res = await post("/api/orders", { items: [{ product_id: 1, quantity }] }, as("dana"), url);
      ids.push(res.body.order_id);
    }
    const res = await get<OrdersReply>("/api/orders", as("dana"), url);
    expect(res.body.orders.map((o) => o.order_id)).toEqual(ids.slice(1));
  });

  it("forgets the least recently active user once the user cap is reached", async () => {
    const { url } = await startUpstream({ maxUsers: 2 });
    const order = { items: [{ product_id: 1, quantity: 1 }] };
    await post("/api/orders", order, as("old"), url);
    await post("/api/orders", order, as("active"), url);
    await post("/api/orders", order, as("old"), url);
    await post("/api/orders", order, as("new"), url);
    expect((await get<OrdersReply>("/api/orders", as("active"), url)).body.total).toBe(0);
    expect((await get<OrdersReply>("/api/orders", as("old"), url)).body.total).toBe(2);
    expect((await get<OrdersReply>("/api/orders", as("new"), url)).body.total).toBe(1);
  });

  it("drops the oldest orders of the least recently active user once the total cap is reached", async () => {
    const { url } = await startUpstream({ maxTotalOrders: 3 });
    const order = { items: [{ product_id: 1, quantity: 1 }] };
    await post("/api/orders", order, as("erin"), url);
    await post("/api/orders", order, as("erin"), url);
    await post("/api/orders", order, as("frank"), url);
    await post("/api/orders", order, as("frank"), url);
    expect((await get<OrdersReply>("/api/orders", as("erin"), url)).body.total).toBe(1);
    expect((await get<OrdersReply>("/api/orders", as("frank"), url)).body.total).toBe(2);
  });
});

describe("unknown routes", () => {
  it.each([
    ["GET", "/nope", {}],
    ["GET", "/api/nope", as("u-404")],
    ["DELETE", "/api/orders", as("u-404")],
  ])("answers 404 JSON for %s %s", async (method, path, headers) => {
    const res = await fetch(`${shared.url}${path}`, { method, headers });
    expectError(await reply(res), 404, "not_found");
  });
});
