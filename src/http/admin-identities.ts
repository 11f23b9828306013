// Admin: identities without a tollgate session. API keys (created with the key shown once, listed
// without secrets, deleted to revoke) and provider-token subjects (blocked, given a tier or limits).
import type { Request, Router } from "express";
import { z } from "zod";
import { KEY_ID, keyNameProblem, newApiKey } from "../auth/api-keys.js";
import { ID_PATTERN } from "../auth/jwt.js";
import { type ApiKey, keySubject, type SubjectProfile } from "../auth/subjects.js";
import { limitText } from "../config/rules.js";
import type { PolicyState } from "../policy/policy-state.js";
import { windowsOrNullSchema } from "../policy/schema.js";
import type { Logger } from "../process/logger.js";
import { externalSubject, type Window } from "../ratelimit/types.js";
import type { ApiStore } from "./api-store.js";
import { HttpError, jsonBody, shown } from "./errors.js";
import { handle, noStore, parse, parseQuery, wholeNumberParameter } from "./handlers.js";
import { requestLogger } from "./request-log.js";

/** The most keys one page of the listing answers (`?limit=`, `?after=` for the next). */
const MAX_LISTED = 1000;
/** A provider subject as a path carries it (URL-encoded): visible ASCII, as the check takes it. */
const SUBJECT = /^[\x21-\x7e]{1,255}$/;

const iso = (ms: number | undefined) => (ms === undefined ? null : new Date(ms).toISOString());
const texts = (limits: Readonly<Record<string, readonly Window[]>>) =>
  Object.fromEntries(Object.entries(limits).map(([c, w]) => [c, w.map(limitText)]));

/** A key as the admin sees it: never its secret, which is not kept. */
const keyJson = (key: ApiKey) => ({
  id: key.id,
  name: key.name,
  tier: key.tier,
  user_id: key.userId ?? null,
  /** Refused while its user is disabled. */
  blocked: key.blocked,
  created_at: iso(key.createdAt),
  last_used_at: iso(key.lastUsedAt),
  own_limits: texts(key.limits),
});

const profileJson = (sub: string, p: SubjectProfile | undefined) => ({
  sub,
  tier: p?.tier ?? null,
  blocked: p?.blocked ?? false,
  own_limits: texts(p?.limits ?? {}),
});

export function identityRoutes(
  admin: Router,
  options: { store: ApiStore; policy: PolicyState; logger: Logger; tierSchema: z.ZodType<string> },
): void {
  const { store, policy, tierSchema } = options;
  // Admin changes are logged with the call's x-request-id, in shape only: ids, tier, categories, never
  // a key, and never a provider subject, which may be a person's address.
  const processLogger = options.logger;
  const limitsSchema = z
    .record(z.string(), windowsOrNullSchema)
    .refine((body) => Object.keys(body).length > 0, "give at least one category")
    .superRefine((body, ctx) => {
      const known = policy.current().policy.categories;
      for (const category of Object.keys(body)) {
        if (!known.includes(category))
          ctx.addIssue({
            code: "custom",
            message: `${shown(category)}: not a category (${known.join(", ")})`,
          });
      }
    });
  const createSchema = z.strictObject({
    // Trimmed, then refused when empty, too long, or holding what would garble a listing.
    name: z
      .string()
      .trim()
      .superRefine((name, ctx) => {
        const problem = keyNameProblem(name);
        if (problem !== undefined) ctx.addIssue({ code: "custom", message: problem });
      }),
    tier: tierSchema,
    user_id: z.string().regex(ID_PATTERN, "not a user id").optional(),
  });

  const keyOf = async (req: Request): Promise<ApiKey> => {
    const id = String(req.params.id);
    const key = KEY_ID.test(id) ? await store.apiKeys.get(id) : undefined;
    if (key === undefined) throw new HttpError("not_found", "No such API key");
    return key;
  };
  const subOf = (req: Request): string => {
    const sub = String(req.params.sub);
    if (!SUBJECT.test(sub)) throw new HttpError("bad_request", "sub: 1 to 255 visible ASCII characters");
    return sub;
  };

  admin.post(
    "/api-keys",
    ...jsonBody,
    handle(async (req, res) => {
      const input = parse(createSchema, req.body);
      if (input.user_id !== undefined) {
        const user = await store.users.get(input.user_id);
        if (user === undefined) throw new HttpError("bad_request", "user_id: no such user");
        if (user.disabled) throw new HttpError("conflict", "user_id: the user is disabled");
      }
      const made = newApiKey();
      const key = await store.apiKeys.create({
        id: made.id,
        hash: made.hash,
        name: input.name,
        tier: input.tier,
        userId: input.user_id,
      });
      // The user deleted or disabled meanwhile: its keys were revoked or blocked before this one existed.
      if (input.user_id !== undefined) {
        const user = await store.users.get(input.user_id);
        if (user === undefined || user.disabled) {
          await store.apiKeys.remove(key.id);
          throw new HttpError("conflict", "user_id: the user was deleted or disabled meanwhile");
        }
      }
      const logger = requestLogger(processLogger, req);
      logger.info({ event: "api_key_created", keyId: key.id, tier: key.tier }, "API key created");
      // The only time the key is ever shown: only its hash is kept.
      noStore(res)
        .status(201)
        .json({ ...keyJson(key), key: made.key });
    }),
  );
  const pageSchema = z.strictObject({
    limit: wholeNumberParameter(1, MAX_LISTED, MAX_LISTED),
    after: z.string().regex(KEY_ID, "not an API key id").optional(),
  });
  admin.get(
    "/api-keys",
    handle(async (req, res) => {
      const { limit, after } = parseQuery(pageSchema, req.query);
      // `next` comes from the ids the store read, not the keys it found: a short page may have more after it.
      const page = await store.apiKeys.list(limit, after);
      res.json({ api_keys: page.keys.map(keyJson), total: page.keys.length, next: page.next ?? null });
    }),
  );
  admin.get(
    "/api-keys/:id",
    handle(async (req, res) => {
      res.json(keyJson(await keyOf(req)));
    }),
  );
  admin.delete(
    "/api-keys/:id",
    handle(async (req, res) => {
      const key = await keyOf(req);
      await store.apiKeys.remove(key.id);
      await store.limiter.reset(keySubject(key.id), policy.current().policy.categories);
      const logger = requestLogger(processLogger, req);
      logger.info({ event: "api_key_revoked", keyId: key.id }, "API key revoked");
      res.json({ message: "API key revoked; refused from now on", id: key.id });
    }),
  );
  admin.put(
    "/api-keys/:id/tier",
    ...jsonBody,
    handle(async (req, res) => {
      const { tier } = parse(z.strictObject({ tier: tierSchema }), req.body);
      const key = await keyOf(req);
      if (!(await store.apiKeys.update(key.id, { tier })))
        throw new HttpError("not_found", "No such API key");
      const logger = requestLogger(processLogger, req);
      logger.info({ event: "api_key_tier", keyId: key.id, tier }, "API key tier changed");
      res.json({ message: "Tier changed; effective on the next request", id: key.id, tier });
    }),
  );
  admin.put(
    "/api-keys/:id/limits",
    ...jsonBody,
    handle(async (req, res) => {
      const limits = parse(limitsSchema, req.body);
      const key = await keyOf(req);
      if (!(await store.apiKeys.update(key.id, { limits })))
        throw new HttpError("not_found", "No such API key");
      const logger = requestLogger(processLogger, req);
      logger.info(
        { event: "api_key_limits_set", keyId: key.id, categories: Object.keys(limits) },
        "API key's own limits set",
      );
      res.json({ ...keyJson(await keyOf(req)), message: "Own limits set; effective on the next request" });
    }),
  );
  admin.delete(
    "/api-keys/:id/limits",
    handle(async (req, res) => {
      const key = await keyOf(req);
      const cleared = Object.fromEntries(Object.keys(key.limits).map((c) => [c, null]));
      await store.apiKeys.update(key.id, { limits: cleared });
      await store.limiter.reset(keySubject(key.id), policy.current().policy.categories);
      const logger = requestLogger(processLogger, req);
      logger.info(
        { event: "api_key_limits_reset", keyId: key.id },
        "API key's own limits and windows cleared",
      );
      res.json({ message: "Own limits and rate-limit windows cleared", id: key.id });
    }),
  );

  admin.get(
    "/subjects/:sub",
    handle(async (req, res) => {
      const sub = subOf(req);
      res.json(profileJson(sub, await store.subjects.get(externalSubject(sub))));
    }),
  );
  const setBlocked = (blocked: boolean) =>
    handle(async (req, res) => {
      const sub = subOf(req);
      await store.subjects.update(externalSubject(sub), { blocked });
      const logger = requestLogger(processLogger, req);
      logger.info(
        { event: blocked ? "subject_blocked" : "subject_unblocked" },
        "provider subject access changed",
      );
      res.json({ sub, blocked });
    });
  admin.put("/subjects/:sub/blocked", setBlocked(true));
  admin.delete("/subjects/:sub/blocked", setBlocked(false));
  admin.put(
    "/subjects/:sub/tier",
    ...jsonBody,
    handle(async (req, res) => {
      const { tier } = parse(z.strictObject({ tier: tierSchema }), req.body);
      const sub = subOf(req);
      await store.subjects.update(externalSubject(sub), { tier });
      const logger = requestLogger(processLogger, req);
      logger.info({ event: "subject_tier", tier }, "provider subject given a tier");
      res.json({ message: "Tier set; effective on the next request", sub, tier });
    }),
  );
  admin.delete(
    "/subjects/:sub/tier",
    handle(async (req, res) => {
      const sub = subOf(req);
      await store.subjects.update(externalSubject(sub), { tier: null });
      const logger = requestLogger(processLogger, req);
      logger.info({ event: "subject_tier", tier: null }, "provider subject back on its token's tier");
      res.json({ message: "The token's tier applies again", sub });
    }),
  );
  admin.put(
    "/subjects/:sub/limits",
    ...jsonBody,
    handle(async (req, res) => {
      const limits = parse(limitsSchema, req.body);
      const sub = subOf(req);
      await store.subjects.update(externalSubject(sub), { limits });
      const logger = requestLogger(processLogger, req);
      logger.info(
        { event: "subject_limits_set", categories: Object.keys(limits) },
        "provider subject's own limits set",
      );
      res.json(profileJson(sub, await store.subjects.get(externalSubject(sub))));
    }),
  );
  admin.delete(
    "/subjects/:sub/limits",
    handle(async (req, res) => {
      const sub = subOf(req);
      const subject = externalSubject(sub);
      const own = (await store.subjects.get(subject))?.limits ?? {};
      const cleared = Object.fromEntries(Object.keys(own).map((c) => [c, null]));
      if (Object.keys(cleared).length > 0) await store.subjects.update(subject, { limits: cleared });
      await store.limiter.reset(subject, policy.current().policy.categories);
      const logger = requestLogger(processLogger, req);
      logger.info({ event: "subject_limits_reset" }, "provider subject's own limits and windows cleared");
      res.json({ message: "Own limits and rate-limit windows cleared", sub });
    }),
  );
}
