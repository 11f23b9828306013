// The tollgate command (node dist/src/cli/main.js) against admin APIs that answer what tollgate never
// does: a redirect (a proxy or a wrong URL in between), a listing without a cursor (a tollgate from
// before the listings paged), a cursor repeated, a 2xx that is no JSON object, a body cut short, and
// words meant for a terminal. Each ends the command with exit 3 and one escaped line, after asking once.
import { spawn } from "node:child_process";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ROOT } from "../support/processes.mjs";
import { ADMIN_TOKEN as TOKEN } from "../support/secrets.mjs";

const BIN = join(ROOT, "dist/src/cli/main.js");
const SLOW = { timeout: 60_000 };

type Seen = { method: string; url: string; authorized: boolean; body: string };
type Answer = (req: IncomingMessage, res: ServerResponse) => void;

/** An admin API whose every answer `answer` makes, and a second origin a redirect may point to. */
let server: Server;
let elsewhere: Server;
let answer: Answer;
let seen: Seen[] = [];
let seenElsewhere: Seen[] = [];

const listen = (record: () => Seen[], answered: () => Answer): Server =>
  createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      record().push({
        method: req.method ?? "",
        url: req.url ?? "",
        authorized: req.headers.authorization !== undefined,
        body,
      });
      answered()(req, res);
    });
  });

const urlOf = (s: Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;

const json =
  (value: unknown, status = 200): Answer =>
  (_req, res) => {
    res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value));
  };

type Run = { status: number | null; stdout: string; stderr: string };

/** `input`: what standard input holds, then its end; "endless": a pipe that never ends (`yes |`). */
function cli(args: string[], input: string | "endless" = ""): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? "", TOLLGATE_ADMIN_URL: urlOf(server), ADMIN_TOKEN: TOKEN },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    if (input === "endless") {
      const line = Buffer.from("y\n".repeat(8192));
      const more = () => {
        while (child.stdin.writable && child.stdin.write(line));
      };
      child.stdin.on("drain", more);
      child.stdin.on("error", () => {});
      more();
    } else child.stdin.end(input);
    // A command that asks forever is killed: its status is then null, never 3.
    const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

const start = (s: Server) => new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));

beforeAll(async () => {
  server = listen(
    () => seen,
    () => answer,
  );
  elsewhere = listen(
    () => seenElsewhere,
    () => json({ message: "taken" }),
  );
  await Promise.all([start(server), start(elsewhere)]);
});

afterAll(async () => {
  for (const s of [server, elsewhere]) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

beforeEach(() => {
  seen = [];
  seenElsewhere = [];
});

describe("tollgate against answers tollgate's admin API never gives", SLOW, () => {
  it("stops api-keys list with exit 3 on a page without a next cursor, as a tollgate from before paging answers", async () => {
    answer = json({ api_keys: [], total: 0 });
    const run = await cli(["api-keys", "list"]);
    expect(run.status).toBe(3);
    expect(run.stderr).toBe("tollgate: the admin API answered a page without its list or next cursor\n");
    expect(seen).toHaveLength(1);
  });

  it("stops users list --all with exit 3 when a page's cursor comes back, after asking once for it", async () => {
    answer = json({ users: [], next_cursor: "u-1" });
    const run = await cli(["users", "list", "--all"]);
    expect(run.status).toBe(3);
    expect(run.stderr).toContain("answered a page's cursor twice");
    expect(seen.map((s) => s.url)).toEqual(["/admin/users?limit=500", "/admin/users?limit=500&cursor=u-1"]);
  });

  it("follows no redirect: a new password never reaches where a 307 points", async () => {
    const target = urlOf(elsewhere);
    answer = (req, res) => {
      if (req.url?.startsWith("/admin/users/") && req.method === "GET") {
        json({ user_id: "u-1", username: "dora", tier: "free", disabled: false })(req, res);
        return;
      }
      res.writeHead(307, { location: `${target}${req.url}` }).end();
    };
    const run = await cli(["users", "password", "u-1", "--password-stdin"], "a-new-password-123");
    expect(run.status).toBe(3);
    expect(run.stderr).toContain("answered 307, a redirect");
    expect(seenElsewhere).toEqual([]);
    expect(run.stdout + run.stderr).not.toContain("a-new-password-123");
  });

  it.each([
    ["null", "null"],
    ["a list", "[]"],
    ["a string", '"ok"'],
    ["nothing", ""],
  ])("answers exit 3, not a bug's exit 1, when a 200 holds %s", async (_what, body) => {
    answer = (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" }).end(body);
    };
    const run = await cli(["users", "get", "u-1"]);
    expect(run.status).toBe(3);
    expect(run.stderr).toContain("answered 200 without a JSON object");
    expect(run.stderr).not.toContain("unexpected error");
  });

  it("answers exit 3 when the answer's body is cut short, rather than read it as empty", async () => {
    answer = (_req, res) => {
      res.writeHead(200, { "content-type": "application/json", "content-length": "100" });
      res.write('{"user_id":');
      setTimeout(() => res.destroy(), 50);
    };
    const run = await cli(["users", "get", "u-1"]);
    expect(run.status).toBe(3);
    expect(run.stderr).toContain("answered 200 but not the rest");
    expect(run.stderr).not.toContain("unexpected error");
  });

  it("prints the admin API's message and problems with every control character escaped", async () => {
    answer = json(
      {
        error: "invalid_policy",
        message: "bad \u001b]0;owned\u0007 policy\nsecond line",
        problems: ["tiers.free: \u001b[2J cleared", { field: "x" }],
      },
      422,
    );
    const run = await cli(["policy", "reload"]);
    expect(run.status).toBe(1);
    expect(run.stderr).toBe(
      [
        "tollgate: bad \\u001b]0;owned\\u0007 policy\\u000asecond line",
        "  tiers.free: \\u001b[2J cleared",
        '  {"field":"x"}',
        "",
      ].join("\n"),
    );
  });
});

describe("tollgate --password-stdin", SLOW, () => {
  it("stops with exit 2 at a pipe that never ends, before any call, rather than read it forever", async () => {
    answer = json({ user_id: "u-1", username: "dora", tier: "free" }, 201);
    const run = await cli(["users", "create", "dora", "--tier", "free", "--password-stdin"], "endless");
    expect(run.status).toBe(2);
    expect(run.stderr).toBe("tollgate: standard input holds more than a password: give the password alone\n");
    expect(seen).toEqual([]);
  });
});
