// tollgate api-keys and subjects run for real (node dist/src/cli/main.js) against a real tollgate on the
// run's redis-server: a key created, listed without its secret, used for a real check on the check
// port, re-tiered, limited and revoked (then refused); subjects blocked and unblocked; --json shapes,
// exit codes, completion; and the key printed by create alone, nowhere else (nor in tollgate's log).
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Command } from "commander";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { newApiKey } from "../../src/auth/api-keys.js";
import { buildProgram } from "../../src/cli/program.js";
import { createRedisStore } from "../../src/store/store.js";
import { ROOT, startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { connectRedis } from "../support/redis.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

const BIN = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).bin.tollgate as string;
/** A test here spawns the CLI up to thirty times, each a Node start: slow on a loaded two-core machine. */
const SLOW = { timeout: 120_000 };
const KEY = /^tg_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/;
/** A provider subject as Auth0 writes them: the "|" and "/" must survive the path. */
const SUB = "auth0|65f1c2/ops@example.com";

let tollgate: TollgateProcess;
let prefix = "";
type Run = { args: string[]; status: number | null; stdout: string; stderr: string };
/** Every run, to check at the end that a key shows only in its own create's stdout. */
const runs: Run[] = [];
const keys: string[] = [];

function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? "", TOLLGATE_ADMIN_URL: tollgate.adminUrl, ADMIN_TOKEN, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("close", (status) => {
      const run = { args, status, stdout, stderr };
      runs.push(run);
      resolve(run);
    });
  });
}

const jsonOf = <T = Record<string, unknown>>(run: Run): T => JSON.parse(run.stdout) as T;

/** A real check on the check port, as Envoy's HTTP ext_authz sends it. */
async function check(key: string, path = "/api/products") {
  const res = await fetch(`${tollgate.checkUrl}/ext_authz${path}`, { headers: { "x-api-key": key } });
  await res.arrayBuffer();
  return res;
}

beforeAll(async () => {
  prefix = `cli-ids-${process.pid}-${Date.now()}:`;
  tollgate = await startTollgate({ REDIS_URL: inject("redisUrl"), REDIS_KEY_PREFIX: prefix });
});

afterAll(async () => {
  await tollgate?.stop();
});

describe("tollgate api-keys", SLOW, () => {
  it("creates a key shown once, lists it without the secret, checks with it, re-tiers, limits and revokes it", async () => {
    const created = await cli([
      "api-keys",
      "create",
      "--name",
      "ci runner",
      "--tier",
      "pro",
      "--user-id",
      "demo-alice",
    ]);
    expect([created.status, created.stderr]).toEqual([0, ""]);
    const shown =
      /^created API key ([0-9a-f]{16}) "ci runner", tier pro, user demo-alice\nthe key, shown once \(store it now; it cannot be shown again\): (\S+)\n$/.exec(
        created.stdout,
      );
    expect(shown, created.stdout).not.toBeNull();
    const [, id = "", key = ""] = shown ?? [];
    keys.push(key);
    expect(key).toMatch(KEY);
    expect(key.slice(3, 19)).toBe(id);

    const list = await cli(["api-keys", "list"]);
    expect(list.stdout.split("\n")[0]).toMatch(/^ID +NAME +TIER +USER +BLOCKED +CREATED +LAST USED$/);
    expect(list.stdout).toMatch(
      new RegExp(`^${id} +ci runner +pro +demo-alice +no +\\d{4}-\\S+Z +never$`, "m"),
    );
    expect(list.stdout).not.toContain("tg_");

    const allowed = await check(key);
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get("x-user-id")).toBe("demo-alice");
    expect(allowed.headers.get("x-user-tier")).toBe("pro");
    // The first check that reaches the store marks the key's last use.
    expect((await cli(["api-keys", "list"])).stdout).toMatch(
      new RegExp(`^${id} +ci runner +pro +demo-alice +no +\\d{4}-\\S+Z +\\d{4}-\\S+Z$`, "m"),
    );

    const got = await cli(["api-keys", "get", id]);
    expect(got.stdout).toMatch(
      new RegExp(`^id: +${id}\\nname: +ci runner\\ntier: +pro\\nuser: +demo-alice\\n`),
    );
    expect(got.stdout).toMatch(/^own limits: +none$/m);

    expect((await cli(["api-keys", "tier", id, "enterprise"])).stdout).toBe(
      `API key ${id} "ci runner": tier pro -> enterprise\n`,
    );
    expect((await check(key)).headers.get("x-user-tier")).toBe("enterprise");

    const limited = await cli(["api-keys", "limits", "set", id, "search=2/1m,50/1h"]);
    expect([limited.status, limited.stdout]).toEqual([0, `API key ${id}: own limits search=2/1m,50/1h\n`]);
    expect((await cli(["api-keys", "get", id])).stdout).toMatch(/^own limits: +search=2\/1m,50\/1h$/m);
    const statuses = [];
    for (let i = 0; i < 3; i += 1) statuses.push((await check(key, "/api/search")).status);
    expect(statuses).toEqual([200, 200, 429]);
    expect((await cli(["api-keys", "limits", "reset", id])).stdout).toBe(
      `API key ${id}: own limits and windows cleared\n`,
    );
    expect((await check(key, "/api/search")).status).toBe(200);
    expect(jsonOf(await cli(["api-keys", "get", id, "--json"])).own_limits).toEqual({});

    const revoked = await cli(["api-keys", "revoke", id]);
    expect([revoked.status, revoked.stdout]).toEqual([
      0,
      `revoked API key ${id} "ci runner": refused from now on\n`,
    ]);
    const refused = await check(key);
    expect(refused.status).toBe(401);
    for (const args of [
      ["get", id],
      ["revoke", id],
      ["tier", id, "pro"],
      ["limits", "reset", id],
    ]) {
      const gone = await cli(["api-keys", ...args]);
      expect([gone.status, gone.stdout, gone.stderr], args.join(" ")).toEqual([
        1,
        "",
        `tollgate: no API key with the id "${id}"\n`,
      ]);
    }
    expect((await cli(["api-keys", "list"])).stdout).not.toContain(id);
  });

  it("never sends the terminal a control character of a key's name, as names stored before they were refused may hold", async () => {
    const store = createRedisStore({ redis: connectRedis(), prefix });
    const { id, hash } = newApiKey();
    // Past the admin API, which refuses such a name now: a terminal escape, a line break, a C1 CSI, a bidi override.
    const name = "\u001b[2J\u001b]0;owned\u0007two\nlines\u009b31m\u202eexe.txt";
    try {
      await store.apiKeys.create({ id, hash, name, tier: "free", userId: undefined });
    } finally {
      await store.close();
    }
    const shown = "\\u001b[2J\\u001b]0;owned\\u0007two\\u000alines\\u009b31m\\u202eexe.txt";
    const outputs = [
      await cli(["api-keys", "list"]),
      await cli(["api-keys", "get", id]),
      await cli(["api-keys", "tier", id, "pro"]),
      await cli(["api-keys", "list", "--json"]),
      await cli(["api-keys", "revoke", id]),
    ];
    for (const run of outputs) {
      expect(run.status, run.args.join(" ")).toBe(0);
      // Only line breaks of the output's own: no other C0 or C1 control, separator or bidi control.
      expect(run.stdout, run.args.join(" ")).not.toMatch(/(?!\n)[\p{Cc}\u2028\u2029\u202e]/u);
    }
    const [list, got, tier, json, revoked] = outputs.map((run) => run.stdout);
    expect(list).toMatch(new RegExp(`^${id} +${shown.replace(/[\\[\]]/g, "\\$&")} +free `, "m"));
    expect(got).toContain(`name:       ${shown}\n`);
    expect(tier).toBe(`API key ${id} "${shown}": tier free -> pro\n`);
    expect(revoked).toBe(`revoked API key ${id} "${shown}": refused from now on\n`);
    // --json escapes them too, and still parses to the name as stored.
    const listed = (JSON.parse(json ?? "") as { api_keys: { id: string; name: string }[] }).api_keys;
    expect(listed.find((k) => k.id === id)?.name).toBe(name);
  });

  it("answers the admin API's JSON with --json, the key only in create's", async () => {
    const created = jsonOf<{ id: string; key: string }>(
      await cli(["--json", "api-keys", "create", "--name", "batch", "--tier", "free"]),
    );
    keys.push(created.key);
    expect(Object.keys(created).sort()).toEqual(
      ["blocked", "created_at", "id", "key", "last_used_at", "name", "own_limits", "tier", "user_id"].sort(),
    );
    expect(created).toMatchObject({
      name: "batch",
      tier: "free",
      user_id: null,
      last_used_at: null,
      own_limits: {},
    });
    expect(created.key).toMatch(KEY);

    expect((await check(created.key)).headers.get("x-user-id")).toBe(`key:${created.id}`);
    const list = jsonOf<{ api_keys: Record<string, unknown>[]; total: number }>(
      await cli(["api-keys", "list", "--json"]),
    );
    expect(list.total).toBe(list.api_keys.length);
    const listed = list.api_keys.find((k) => k.id === created.id);
    expect(Object.keys(listed ?? {}).sort()).toEqual(
      ["blocked", "created_at", "id", "last_used_at", "name", "own_limits", "tier", "user_id"].sort(),
    );
    const got = jsonOf(await cli(["api-keys", "get", created.id, "--json"]));
    expect(got).toEqual(listed);
    expect(jsonOf(await cli(["api-keys", "tier", created.id, "pro", "--json"]))).toMatchObject({
      id: created.id,
      tier: "pro",
    });
    expect(
      jsonOf(await cli(["api-keys", "limits", "set", created.id, "orders=1/1h", "--json"])),
    ).toMatchObject({
      id: created.id,
      own_limits: { orders: ["1/1h"] },
    });
    expect(jsonOf(await cli(["api-keys", "revoke", created.id, "--json"]))).toMatchObject({ id: created.id });
    expect((await check(created.key)).status).toBe(401);
  });

  it("exits 1 on what the admin API refuses and 2 on bad usage, never echoing a key", async () => {
    const tier = await cli(["api-keys", "create", "--name", "x", "--tier", "platinum"]);
    expect(tier.status).toBe(1);
    expect(tier.stderr).toMatch(/^tollgate: .*tier.*\n$/);
    const user = await cli([
      "api-keys",
      "create",
      "--name",
      "x",
      "--tier",
      "pro",
      "--user-id",
      "nobody-here",
    ]);
    expect([user.status, user.stderr]).toEqual([1, "tollgate: user_id: no such user\n"]);
    expect((await cli(["api-keys", "get", "0123456789abcdef"])).status).toBe(1);
    expect((await cli(["api-keys", "get", "not-an-id"])).status).toBe(2);

    expect((await cli(["api-keys", "create", "--name", "x"])).status).toBe(2); // --tier is required
    expect((await cli(["api-keys", "create", "--tier", "pro"])).status).toBe(2);
    expect((await cli(["api-keys", "get"])).status).toBe(2);
    expect((await cli(["api-keys", "tier", "0123456789abcdef"])).status).toBe(2);
    expect((await cli(["api-keys", "limits", "set", "0123456789abcdef", "search"])).status).toBe(2);
    expect((await cli(["api-keys", "frobnicate"])).status).toBe(2);

    // A key pasted where its id goes is refused without being repeated (commander would quote it).
    const made = jsonOf<{ id: string; key: string }>(
      await cli(["api-keys", "create", "--name", "pasted", "--tier", "free", "--json"]),
    );
    keys.push(made.key);
    for (const command of [["get"], ["revoke"], ["tier"], ["limits", "reset"]]) {
      const pasted = await cli(["api-keys", ...command, made.key, ...(command[0] === "tier" ? ["pro"] : [])]);
      expect([pasted.status, pasted.stderr]).toEqual([
        2,
        "tollgate: give the key's id (api-keys list shows it), not the key itself\n",
      ]);
    }
    // Pasted with what came along (a space, a header's name, the scheme), or only its secret.
    const secret = made.key.slice(20);
    for (const pasted of [` ${made.key}`, `X-API-Key: ${made.key}`, `ApiKey ${made.key}`]) {
      const run = await cli(["api-keys", "revoke", pasted]);
      expect([run.status, run.stderr]).toEqual([
        2,
        "tollgate: give the key's id (api-keys list shows it), not the key itself\n",
      ]);
    }
    // Refused before any call: a secret alone would travel in the request's path. One secret in 64
    // begins with "-", which commander takes for an option: refused too, and never repeated.
    for (const alone of [secret.replace(/^-/, "A"), `-${secret.slice(1)}`]) {
      const secretOnly = await cli(["api-keys", "get", alone]);
      expect([secretOnly.status, secretOnly.stderr]).toEqual([
        2,
        alone.startsWith("-")
          ? "error: unknown option '(43 characters, not shown)'\n(run with --help for usage)\n"
          : "tollgate: an API key's id is 16 hex digits (api-keys list shows it)\n",
      ]);
    }
    // A secret holds "tg_" by chance once in about 6,000 keys: still a secret, not a whole key.
    const unlucky = await cli(["api-keys", "get", `Ab3tg_${"x".repeat(37)}`]);
    expect([unlucky.status, unlucky.stderr]).toEqual([
      2,
      "tollgate: an API key's id is 16 hex digits (api-keys list shows it)\n",
    ]);
    expect((await cli(["api-keys", "get", "0123456789abcdef"])).stderr).toBe(
      'tollgate: no API key with the id "0123456789abcdef"\n',
    );
    expect((await check(made.key)).status).toBe(200);
  });
});

describe("tollgate subjects", SLOW, () => {
  it("blocks and unblocks a provider subject, sets and clears its tier and limits, seen through subjects get", async () => {
    const fresh = await cli(["subjects", "get", SUB]);
    expect([fresh.status, fresh.stdout]).toEqual([
      0,
      `sub:        ${SUB}\ntier:       (the token's)\nblocked:    false\nown limits: none\n`,
    ]);
    expect((await cli(["subjects", "block", SUB])).stdout).toBe(`${SUB}: blocked\n`);
    expect((await cli(["subjects", "get", SUB])).stdout).toMatch(/^blocked: +true$/m);
    expect(jsonOf(await cli(["subjects", "get", SUB, "--json"]))).toEqual({
      sub: SUB,
      tier: null,
      blocked: true,
      own_limits: {},
    });
    expect(jsonOf(await cli(["subjects", "unblock", SUB, "--json"]))).toEqual({ sub: SUB, blocked: false });
    expect((await cli(["subjects", "get", SUB])).stdout).toMatch(/^blocked: +false$/m);

    expect((await cli(["subjects", "tier", SUB, "enterprise"])).stdout).toBe(
      `${SUB}: tier enterprise, over the token's\n`,
    );
    expect((await cli(["subjects", "get", SUB])).stdout).toMatch(/^tier: +enterprise$/m);
    expect((await cli(["subjects", "limits", "set", SUB, "search=5/1m", "orders=1/1h"])).stdout).toBe(
      `${SUB}: own limits search=5/1m orders=1/1h\n`,
    );
    expect(jsonOf(await cli(["subjects", "get", SUB, "--json"]))).toEqual({
      sub: SUB,
      tier: "enterprise",
      blocked: false,
      own_limits: { search: ["5/1m"], orders: ["1/1h"] },
    });
    expect((await cli(["subjects", "limits", "reset", SUB])).stdout).toBe(
      `${SUB}: own limits and windows cleared\n`,
    );
    expect((await cli(["subjects", "tier", SUB, "--clear"])).stdout).toBe(
      `${SUB}: the token's tier applies again\n`,
    );
    expect(jsonOf(await cli(["subjects", "get", SUB, "--json"]))).toEqual({
      sub: SUB,
      tier: null,
      blocked: false,
      own_limits: {},
    });
  });

  it("exits 1 on what the admin API refuses and 2 on bad usage", async () => {
    const tier = await cli(["subjects", "tier", SUB, "platinum"]);
    expect(tier.status).toBe(1);
    const category = await cli(["subjects", "limits", "set", SUB, "nope=5/1m"]);
    expect(category.status).toBe(1);
    expect(category.stderr).toMatch(/^tollgate: .*nope: not a category/);
    expect((await cli(["subjects", "get", "a".repeat(256)])).status).toBe(1);

    const neither = await cli(["subjects", "tier", SUB]);
    expect([neither.status, neither.stderr]).toEqual([
      2,
      "tollgate: give either a tier or --clear (back to the token's tier)\n",
    ]);
    expect((await cli(["subjects", "tier", SUB, "pro", "--clear"])).status).toBe(2);
    // URLs resolve "." and ".." as path steps, %2E too: the command says how the admin API takes them.
    for (const [sub, escaped] of [
      ["..", "%2E%2E"],
      [".", "%2E"],
    ]) {
      const dots = await cli(["subjects", "block", sub as string]);
      expect(dots.status).toBe(2);
      expect(dots.stderr).toContain(`/admin/subjects/${escaped}/blocked`);
    }
    expect((await cli(["subjects", "block"])).status).toBe(2);
    expect((await cli(["subjects", "limits", "set", SUB, "search"])).status).toBe(2);
  });
});

describe("help, completion, and where a key shows", SLOW, () => {
  it("answers --help on every api-keys and subjects command with exit 0", async () => {
    const paths: string[][] = [];
    const walk = (command: Command, path: string[]) => {
      paths.push(path);
      for (const sub of command.commands) walk(sub, [...path, sub.name()]);
    };
    for (const group of buildProgram("test").commands)
      if (["api-keys", "subjects"].includes(group.name())) walk(group, [group.name()]);
    expect(paths.length).toBe(17);
    for (const path of paths) {
      const run = await cli([...path, "--help"]);
      expect(run.status, path.join(" ")).toBe(0);
      expect(run.stdout).toMatch(new RegExp(`^Usage: tollgate ${path.join(" ")} `));
      expect(run.stdout).toContain("Exit codes: 0 ok;");
    }
  });

  it("completes the new commands in bash", async () => {
    const script = join(mkdtempSync(join(tmpdir(), "tollgate-cli-ids-")), "tollgate.bash");
    writeFileSync(script, (await cli(["completion", "bash"])).stdout);
    const complete = (...words: string[]) =>
      spawnSync(
        "bash",
        [
          "-c",
          `source ${script}; COMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; _tollgate; printf '%s\\n' "\${COMPREPLY[@]}"`,
        ],
        { encoding: "utf8" },
      )
        .stdout.trim()
        .split("\n");
    expect(complete("tollgate", "")).toEqual(expect.arrayContaining(["api-keys", "subjects"]));
    expect(complete("tollgate", "api-keys", "")).toEqual(
      expect.arrayContaining(["create", "list", "get", "revoke", "tier", "limits"]),
    );
    expect(complete("tollgate", "api-keys", "create", "--")).toEqual(
      expect.arrayContaining(["--name", "--tier", "--user-id", "--json"]),
    );
    expect(complete("tollgate", "subjects", "limits", "")).toEqual(expect.arrayContaining(["set", "reset"]));
    expect(complete("tollgate", "subjects", "tier", "--c")).toEqual(["--clear"]);
  });

  it("printed each key in its own create's stdout only: no other output, no stderr, not tollgate's log", () => {
    expect(keys.length).toBe(3);
    for (const key of keys) {
      const secret = key.slice(20);
      const showing = runs.filter((r) => r.stdout.includes(secret) || r.stderr.includes(secret));
      expect(showing.map((r) => r.args.join(" "))).toHaveLength(1);
      expect(showing[0]?.args).toEqual(expect.arrayContaining(["api-keys", "create"]));
      expect(showing[0]?.stderr).toBe("");
      expect(tollgate.output()).not.toContain(secret);
    }
    for (const run of runs) expect(run.stdout + run.stderr).not.toContain(ADMIN_TOKEN);
  });
});
