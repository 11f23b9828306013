// tollgate sessions list|revoke and limits get|set|reset: a user's sessions and rate limits.
import { Argument, type Command, InvalidArgumentError } from "commander";
import { durationText, LIMIT_FORM, parseLimit } from "../config/rules.js";
import { action, type Context, findUser, report, USER_ARGUMENT } from "./context.js";
import { fields, json, print, table } from "./output.js";

type Session = {
  session_id: string;
  device_name: string | null;
  ip: string | null;
  user_agent: string | null;
  created_at: string;
  last_accessed: string;
};

type WindowJson = { limit: number; window_seconds: number; used: number; remaining: number; reset: number };
type CategoryLimits = {
  limit: number;
  used: number;
  remaining: number;
  reset: number;
  algorithm: string;
  source: "tier" | "user";
  tier_limits: string[];
  own_limits: string[] | null;
  windows: WindowJson[];
};
type Limits = { user_id: string; tier: string; limits: Record<string, CategoryLimits> };

/** `search=10/1s,500/1h` as the API's `{search: ["10/1s", "500/1h"]}`; `search=tier` follows the tier again. */
function limitAssignment(value: string, previous: Record<string, string[] | null> | undefined) {
  const at = value.indexOf("=");
  const category = value.slice(0, at);
  const limits = value.slice(at + 1);
  if (at < 1 || limits === "")
    throw new InvalidArgumentError(
      "write CATEGORY=LIMIT[,LIMIT…] (e.g. search=10/1s,500/1h) or CATEGORY=tier",
    );
  if (limits === "tier") return { ...previous, [category]: null };
  // Spaces around the commas belong to the list ("10/1s, 500/1h" in quotes); each limit is then read
  // as the admin API reads it, so that a typo fails here, naming it, before any call is made.
  const list = limits.split(",").map((l) => l.trim());
  const bad = list.find((l) => parseLimit(l) === undefined);
  if (bad !== undefined) throw new InvalidArgumentError(`bad limit "${bad}": expected ${LIMIT_FORM}`);
  return { ...previous, [category]: list };
}

/** The admin API's own limits as `limits set` takes them: `search=10/1s,500/1h general=5000/1h`, or "none". */
export const ownLimitsText = (own: Readonly<Record<string, readonly string[]>>): string =>
  Object.entries(own)
    .map(([category, limits]) => `${category}=${limits.join(",")}`)
    .join(" ") || "none";

/** The argument of `limits set` and its likes for API keys and subjects. */
export const limitsArgument = () =>
  new Argument(
    "<category=limits...>",
    "e.g. search=10/1s,500/1h general=5000/1h; search=tier follows the tier again",
  ).argParser(limitAssignment);

function limitsTable(answer: Limits): string {
  const rows = Object.entries(answer.limits).flatMap(([category, c]) =>
    c.windows.map((w, i) => [
      i === 0 ? category : "",
      i === 0 ? c.source : "",
      i === 0 ? c.algorithm : "",
      `${w.limit}/${durationText(w.window_seconds * 1000)}`,
      w.used,
      w.remaining,
      new Date(w.reset * 1000).toISOString(),
    ]),
  );
  const head = fields([
    ["user", answer.user_id],
    ["tier", answer.tier],
  ]);
  return `${head}\n${table(["category", "source", "algorithm", "limit", "used", "remaining", "reset"], rows)}`;
}

async function revoke(ctx: Context, ref: string, sessionId: string | undefined): Promise<void> {
  const client = ctx.client();
  const user = await findUser(client, ref);
  const base = `/admin/users/${encodeURIComponent(user.user_id)}`;
  const answer =
    sessionId === undefined || sessionId === ""
      ? await client.call<{ revoked: number }>("POST", `${base}/revoke`)
      : await client.call<{ revoked: number }>("DELETE", `${base}/sessions/${encodeURIComponent(sessionId)}`);
  report(ctx, answer, `${user.username}: ${answer.revoked} session(s) revoked`);
}

export function accessCommands(program: Command): void {
  const sessions = program.command("sessions").description("a user's sessions");
  sessions
    .command("list")
    .description("list a user's sessions")
    .argument(...USER_ARGUMENT)
    .action(
      action(async (ctx, ref: string) => {
        const client = ctx.client();
        const user = await findUser(client, ref);
        const answer = await client.call<{ sessions: Session[]; total: number }>(
          "GET",
          `/admin/users/${encodeURIComponent(user.user_id)}/sessions`,
        );
        const headers = ["session_id", "device_name", "ip", "created_at", "last_accessed", "user_agent"];
        const rows = answer.sessions.map((s) => [
          s.session_id,
          s.device_name,
          s.ip,
          s.created_at,
          s.last_accessed,
          s.user_agent,
        ]);
        print(ctx.json ? json(answer) : table(headers, rows));
      }),
    );
  sessions
    .command("revoke")
    .description("revoke one session of a user, or every session without a session id")
    .argument(...USER_ARGUMENT)
    .argument("[session-id]", "the session to revoke (from sessions list)")
    .action(action((ctx, ref: string, sessionId: string | undefined) => revoke(ctx, ref, sessionId)));

  const limits = program.command("limits").description("a user's rate limits and windows");
  limits
    .command("get")
    .description("every category's windows as they stand, and where the limits come from")
    .argument(...USER_ARGUMENT)
    .action(
      action(async (ctx, ref: string) => {
        const client = ctx.client();
        const user = await findUser(client, ref);
        const answer = await client.call<Limits>(
          "GET",
          `/admin/users/${encodeURIComponent(user.user_id)}/limits`,
        );
        print(ctx.json ? json(answer) : limitsTable(answer));
      }),
    );
  limits
    .command("set")
    .description("give a user its own limits for some categories (the others follow the tier)")
    .argument(...USER_ARGUMENT)
    .addArgument(limitsArgument())
    .action(
      action(async (ctx, ref: string, body: Record<string, string[] | null>) => {
        const client = ctx.client();
        const user = await findUser(client, ref);
        const path = `/admin/users/${encodeURIComponent(user.user_id)}/limits`;
        const answer = await client.call<{ own_limits: Record<string, string[]> }>("PUT", path, body);
        report(ctx, answer, `${user.username}: own limits ${ownLimitsText(answer.own_limits)}`);
      }),
    );
  limits
    .command("reset")
    .description("a fresh start on the tier: the user's own limits and every window counted so far go")
    .argument(...USER_ARGUMENT)
    .action(
      action(async (ctx, ref: string) => {
        const client = ctx.client();
        const user = await findUser(client, ref);
        const answer = await client.call("DELETE", `/admin/users/${encodeURIComponent(user.user_id)}/limits`);
        report(ctx, answer, `${user.username}: own limits and windows cleared`);
      }),
    );
}
