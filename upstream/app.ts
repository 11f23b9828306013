// Demo upstream app behind tollgate: trusts x-user-id/x-user-tier and serves a tiny shop API.
import { randomUUID } from "node:crypto";
import type { Express, NextFunction, Request, Response } from "express";
import express from "express";

export type UpstreamOptions = {
  /** Orders kept per user; the oldest are dropped first. */
  maxOrdersPerUser?: number;
  /** Users whose orders are kept; the least recently active user is dropped first. */
  maxUsers?: number;
  /** Orders kept across all users, so the store stays bounded even with 50-item orders. */
  maxTotalOrders?: number;
  now?: () => Date;
  newOrderId?: () => string;
};

/** Prices are integer cents so totals never suffer floating-point rounding. */
export type Product = { id: number; name: string; price: number; category: string };

type OrderLine = {
  product_id: number;
  name: string;
  quantity: number;
  unit_price: number;
  line_total: number;
};
type Order = {
  order_id: string;
  status: "created";
  user_id: string;
  items: OrderLine[];
  total: number;
  created_at: string;
};
type User = { id: string; tier: string | null };

export const CATALOGUE: readonly Product[] = [
  { id: 1, name: "Mechanical Keyboard", price: 8999, category: "electronics" },
  { id: 2, name: "Wireless Mouse", price: 2499, category: "electronics" },
  { id: 3, name: "USB-C Hub", price: 3999, category: "electronics" },
  { id: 4, name: "Noise-Cancelling Headphones", price: 19999, category: "electronics" },
  { id: 5, name: "27-inch Monitor", price: 24900, category: "electronics" },
  { id: 6, name: "Chef's Knife", price: 5950, category: "kitchen" },
  { id: 7, name: "Cast Iron Skillet", price: 3495, category: "kitchen" },
  { id: 8, name: "Pour-Over Coffee Maker", price: 2800, category: "kitchen" },
  { id: 9, name: "Electric Kettle", price: 4299, category: "kitchen" },
  { id: 10, name: "Bamboo Cutting Board", price: 1899, category: "kitchen" },
  { id: 11, name: "Designing Data-Intensive Applications", price: 4599, category: "books" },
  { id: 12, name: "The Pragmatic Programmer", price: 3999, category: "books" },
  { id: 13, name: "Site Reliability Engineering", price: 4250, category: "books" },
  { id: 14, name: "Release It!", price: 3795, category: "books" },
  { id: 15, name: "Trail Running Shoes", price: 12999, category: "outdoor" },
  { id: 16, name: "Insulated Water Bottle", price: 2995, category: "outdoor" },
  { id: 17, name: "Ultralight Tent", price: 34900, category: "outdoor" },
  { id: 18, name: "Headlamp", price: 3450, category: "outdoor" },
  { id: 19, name: "Desk Lamp", price: 4999, category: "home" },
  { id: 20, name: "Standing Desk Mat", price: 5999, category: "home" },
];

const PRODUCTS_BY_ID = new Map(CATALOGUE.map((product) => [product.id, product]));
const MAX_QUERY_LENGTH = 200;
const MAX_ORDER_ITEMS = 50;
const MAX_QUANTITY = 100;

/** Carries a stable code and status to the error handler; its message is safe to show to clients. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Orders per user, bounded three ways; Map insertion order doubles as least-recently-active order. */
class OrderStore {
  private readonly byUser = new Map<string, Order[]>();
  private count = 0;

  constructor(private readonly limits: { perUser: number; users: number; total: number }) {}

  add(order: Order): void {
    const orders = this.byUser.get(order.user_id) ?? [];
    this.byUser.delete(order.user_id);
    this.byUser.set(order.user_id, orders);
    orders.push(order);
    this.count += 1;
    if (orders.length > this.limits.perUser) {
      orders.shift();
      this.count -= 1;
    }
    while (this.byUser.size > this.limits.users || this.count > this.limits.total) this.evictOldest();
  }

  list(userId: string): readonly Order[] {
    return this.byUser.get(userId) ?? [];
  }

  private evictOldest(): void {
    const oldest = this.byUser.entries().next().value;
    if (oldest === undefined) return;
    const [userId, orders] = oldest;
    if (this.byUser.size > this.limits.users) {
      this.byUser.delete(userId);
      this.count -= orders.length;
      return;
    }
    orders.shift();
    this.count -= 1;
    if (orders.length === 0) this.byUser.delete(userId);
  }
}

function headerValue(req: Request, name: string): string {
  const value = req.headers[name];
  return typeof value === "string" ? value.trim() : "";
}

/** tollgate sends an empty x-user-id for anonymous callers, so empty counts as missing. */
function requireUser(req: Request, res: Response, next: NextFunction): void {
  const id = headerValue(req, "x-user-id");
  if (id === "") throw new HttpError(401, "unauthorized", "missing x-user-id header");
  const tier = headerValue(req, "x-user-tier");
  res.locals.user = { id, tier: tier === "" ? null : tier } satisfies User;
  next();
}

function currentUser(res: Response): User {
  return res.locals.user as User;
}

function intParam(req: Request, name: string, fallback: number, min: number, max: number): number {
  const raw = req.query[name];
  if (raw === undefined) return fallback;
  const value = typeof raw === "string" && /^\d{1,9}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(value >= min && value <= max)) {
    throw new HttpError(400, "invalid_query", `${name} must be an integer from ${min} to ${max}`);
  }
  return value;
}

function listProducts(req: Request, res: Response): void {
  const limit = intParam(req, "limit", 20, 1, 100);
  const offset = intParam(req, "offset", 0, 0, 1_000_000);
  const products = CATALOGUE.slice(offset, offset + limit);
  res.json({ products, total: CATALOGUE.length, limit, offset, user: currentUser(res) });
}

function search(req: Request, res: Response): void {
  const raw = req.query.q;
  if (typeof raw !== "string" || raw.trim() === "") {
    throw new HttpError(400, "invalid_query", "q is required");
  }
  if (raw.length > MAX_QUERY_LENGTH) {
    throw new HttpError(400, "invalid_query", `q must be at most ${MAX_QUERY_LENGTH} characters`);
  }
  const query = raw.trim();
  const needle = query.toLowerCase();
  const results = CATALOGUE.filter(
    (product) => product.name.toLowerCase().includes(needle) || product.category.includes(needle),
  );
  res.json({ query, results, total: results.length, user: currentUser(res) });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function parseOrderLine(item: unknown, index: number): OrderLine {
  const where = `items[${index}]`;
  if (!isRecord(item)) throw new HttpError(400, "invalid_order", `${where} must be an object`);
  const { product_id: productId, quantity } = item;
  if (typeof productId !== "number" || !Number.isInteger(productId)) {
    throw new HttpError(400, "invalid_order", `${where}.product_id must be an integer`);
  }
  const product = PRODUCTS_BY_ID.get(productId);
  if (product === undefined) {
    throw new HttpError(400, "unknown_product", `${where}.product_id ${productId} is not in the catalogue`);
  }
  if (
    !(typeof quantity === "number" && Number.isInteger(quantity) && quantity >= 1 && quantity <= MAX_QUANTITY)
  ) {
    throw new HttpError(
      400,
      "invalid_order",
      `${where}.quantity must be an integer from 1 to ${MAX_QUANTITY}`,
    );
  }
  return {
    product_id: product.id,
    name: product.name,
    quantity,
    unit_price: product.price,
    line_total: product.price * quantity,
  };
}

function parseOrderLines(body: unknown): OrderLine[] {
  const items = isRecord(body) ? body.items : undefined;
  if (!Array.isArray(items) || items.length === 0) {
    throw new HttpError(400, "invalid_order", "items must be a non-empty array");
  }
  if (items.length > MAX_ORDER_ITEMS) {
    throw new HttpError(400, "invalid_order", `items must hold at most ${MAX_ORDER_ITEMS} entries`);
  }
  return items.map(parseOrderLine);
}

/**
 * Without this, express.json() silently skips other content types and the order looks empty.
 * req.is() is null when there is no body at all; that case reaches the items check and gets a 400.
 */
function requireJsonBody(req: Request, _res: Response, next: NextFunction): void {
  if (req.is("application/json") === false) {
    throw new HttpError(415, "unsupported_media_type", "content-type must be application/json");
  }
  next();
}

/** Maps body-parser failures by their stable `type`; anything unrecognised becomes a generic 500. */
const BODY_PARSER_ERRORS: Record<string, { status: number; code: string; message: string }> = {
  "entity.parse.failed": { status: 400, code: "invalid_json", message: "request body is not valid JSON" },
  "entity.too.large": { status: 413, code: "payload_too_large", message: "request body exceeds 16kb" },
  "encoding.unsupported": { status: 415, code: "unsupported_media_type", message: "unsupported encoding" },
  "charset.unsupported": { status: 415, code: "unsupported_media_type", message: "unsupported charset" },
  "request.aborted": { status: 400, code: "bad_request", message: "request body was aborted" },
  "request.size.invalid": { status: 400, code: "bad_request", message: "request body size mismatch" },
};

function errorHandler(err: unknown, _req: Request, res: Response, next: NextFunction): void {
  if (res.headersSent) {
    next(err);
    return;
  }
  if (err instanceof HttpError) {
    res.status(err.status).json({ error: err.code, message: err.message });
    return;
  }
  const type = isRecord(err) && typeof err.type === "string" ? err.type : "";
  const known = BODY_PARSER_ERRORS[type];
  if (known !== undefined) {
    res.status(known.status).json({ error: known.code, message: known.message });
    return;
  }
  res.status(500).json({ error: "internal_error", message: "internal server error" });
}

export function createUpstreamApp(options: UpstreamOptions = {}): Express {
  const now = options.now ?? (() => new Date());
  const newOrderId = options.newOrderId ?? randomUUID;
  const store = new OrderStore({
    perUser: options.maxOrdersPerUser ?? 100,
    users: options.maxUsers ?? 10_000,
    total: options.maxTotalOrders ?? 100_000,
  });

  const app = express();
  app.disable("x-powered-by");
  app.disable("etag");

  app.get("/health", (_req, res) => {
    res.json({ status: "ok" });
  });

  app.use("/api", requireUser);
  app.get("/api/products", listProducts);
  app.get("/api/search", search);
  app.get("/api/orders", (_req, res) => {
    const user = currentUser(res);
    const orders = store.list(user.id);
    res.json({ orders, total: orders.length, user });
  });
  app.post("/api/orders", requireJsonBody, express.json({ limit: "16kb" }), (req, res) => {
    const user = currentUser(res);
    const items = parseOrderLines(req.body);
    const order: Order = {
      order_id: newOrderId(),
      status: "created",
      user_id: user.id,
      items,
      total: items.reduce((sum, line) => sum + line.line_total, 0),
      created_at: now().toISOString(),
    };
    store.add(order);
    res.status(201).json({ ...order, user });
  });

  app.use((req, res) => {
    res.status(404).json({ error: "not_found", message: `no route for ${req.method} ${req.path}` });
  });
  app.use(errorHandler);
  return app;
}
