// The tollgate command run for real (node dist/src/cli/main.js, as package.json's bin names it) against a
// real tollgate on the run's redis-server: every command group, --json, exit codes, one-line errors,
// --help everywhere, completion scripts driven in bash and zsh, offline validation of good and bad files.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Command } from "commander";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { buildProgram } from "../../src/cli/program.js";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { findBinary, freePort } from "../support/local.mjs";
import { ROOT, startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

const BIN = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).bin.tollgate as string;
const RLS_FOLDER = join(ROOT, "test/fixtures/rls/e2e/exact");
const PASSWORD = "a-new-password-123";
/** A test here spawns the CLI up to thirty times, each a Node start: slow on a loaded two-core machine. */
const SLOW = { timeout: 120_000 };

let tollgate: TollgateProcess;
let policyFile: string;
const folder = mkdtempSync(join(tmpdir(), "tollgate-cli-"));
/** Everything every run printed: no token, no stack trace may be in it (checked last). */
const printed: string[] = [];

type Run = { status: number | null; stdout: string; stderr: string };

/** The CLI in a process of its own, as a shell runs it; `env` over a clean environment. */
function cli(args: string[], options: { input?: string; env?: Record<string, string> } = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? "",
        TOLLGATE_ADMIN_URL: tollgate.adminUrl,
        ADMIN_TOKEN,
        ...options.env,
      },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.stdin.end(options.input ?? "");
    child.on("close", (status) => {
      printed.push(stdout, stderr);
      resolve({ status, stdout, stderr });
    });
  });
}

const jsonOf = <T = Record<string, unknown>>(run: Run): T => JSON.parse(run.stdout) as T;

async function loginAs(username: string, password: string, device = "laptop") {
  return fetch(`${tollgate.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-device-name": device },
    body: JSON.stringify({ username, password }),
  });
}

beforeAll(async () => {
  policyFile = join(folder, "policy.yaml");
  writeFileSync(policyFile, DEFAULT_POLICY_YAML);
  tollgate = await startTollgate({
    REDIS_URL: inject("redisUrl"),
    REDIS_KEY_PREFIX: `cli-${process.pid}-${Date.now()}:`,
    // Exact counts and lockouts, not latency: at the default 100 ms a starved machine answers a
    // check degraded (no count left to print, a 200 for a 429).
    REDIS_TIMEOUT_MS: "1000",
    POLICY_FILE: policyFile,
    RLS_CONFIG: RLS_FOLDER,
    LOGIN_LOCKOUT: "3/15m",
  });
});

afterAll(async () => {
  await tollgate?.stop();
});

describe("tollgate policy validate and rls validate (offline)", SLOW, () => {
  it("accepts a valid policy with exit 0 and prints the version the server will report", async () => {
    const run = await cli(["policy", "validate", policyFile], {
      env: { TOLLGATE_ADMIN_URL: "http://127.0.0.1:9" },
    });
    expect(run.status).toBe(0);
    const shown = jsonOf<{ version: string }>(await cli(["policy", "show", "--json"]));
    expect(run.stdout).toContain(`valid policy, version ${shown.version}`);
  });

  it("names the file, line and field of every problem of a bad policy, with exit 1", async () => {
    const bad = join(folder, "bad.yaml");
    writeFileSync(
      bad,
      [
        "tiers:",
        "  anonymous: { general: 100/1h }",
        "  free:",
        "    general: 100 per hour",
        "routes:",
        "  - { path: /api/a, category: general }",
        "  - method: FETCH",
        "    path: /api/b",
        "    category: general",
        "default: { category: general }",
        "colour: blue",
      ].join("\n"),
    );
    const run = await cli(["policy", "validate", bad]);
    expect(run.status).toBe(1);
    const lines = run.stderr.trim().split("\n");
    expect(lines).toContainEqual(
      expect.stringMatching(new RegExp(`^${bad}:4: tiers\\.free\\.general: bad limit`)),
    );
    expect(lines).toContainEqual(
      expect.stringMatching(new RegExp(`^${bad}:7: routes\\[1\\]\\.method: method must be`)),
    );
    expect(lines).toContainEqual(`${bad}:11: unknown key "colour"`);
    const json = jsonOf<{ valid: boolean; problems: string[] }>(
      await cli(["policy", "validate", bad, "--json"]),
    );
    expect(json.valid).toBe(false);
    expect(json.problems).toEqual(lines);
  });

  it("gives the line of a YAML syntax error and of a missing reachable category", async () => {
    const broken = join(folder, "broken.yaml");
    writeFileSync(broken, "tiers:\n  anonymous: { general: 100/1h\nroutes: []\n");
    const syntax = await cli(["policy", "validate", broken]);
    expect(syntax.status).toBe(1);
    expect(syntax.stderr).toMatch(
      new RegExp(`^${broken}:\\d+: not valid YAML or JSON: .*\\(line \\d+, column \\d+\\)\\n$`),
    );
    const fixture = join(ROOT, "test/fixtures/policy/missing-category.yaml");
    const missing = await cli(["policy", "validate", fixture]);
    expect(missing.stderr).toBe(
      `${fixture}:3: tiers.free.search: missing, but routes[0] can send free users to category "search"\n`,
    );
    const absent = await cli(["policy", "validate", join(folder, "nope.yaml")]);
    expect([absent.status, absent.stderr]).toEqual([
      1,
      `${join(folder, "nope.yaml")}: cannot read the file (ENOENT)\n`,
    ]);
  });

  it("refuses a policy without the tiers the provider settings in its environment name, as the server's reload does", async () => {
    const noEnterprise = join(folder, "no-enterprise.yaml");
    writeFileSync(noEnterprise, DEFAULT_POLICY_YAML.replace(/^ {2}enterprise: .*\n/m, ""));
    const provider = {
      JWKS_URL: "https://idp.example/jwks.json",
      JWT_TIER_CLAIM: "plan",
      JWT_TIER_MAP: "basic=free,corporate=enterprise",
    };
    expect((await cli(["policy", "validate", noEnterprise])).status).toBe(0);
    expect((await cli(["policy", "validate", policyFile], { env: provider })).status).toBe(0);
    const refused = await cli(["policy", "validate", noEnterprise], { env: provider });
    expect([refused.status, refused.stderr]).toEqual([
      1,
      `${noEnterprise}:2: JWT_TIER_MAP: corporate=enterprise names "enterprise", which is not a tier of the policy (anonymous, free, pro)\n`,
    ]);
    // EXTERNAL_DEFAULT_TIER is "free" with a provider, as the server has it, and counts given alone.
    const noFree = join(folder, "no-free.yaml");
    writeFileSync(noFree, DEFAULT_POLICY_YAML.replace(/^ {2}free: .*\n/m, ""));
    expect(
      (await cli(["policy", "validate", noFree, "--json"], { env: { JWKS_URL: provider.JWKS_URL } })).stdout,
    ).toContain('EXTERNAL_DEFAULT_TIER: \\"free\\" is not a tier of the policy (anonymous, pro, enterprise)');
    const gold = await cli(["policy", "validate", policyFile], { env: { EXTERNAL_DEFAULT_TIER: "gold" } });
    expect([gold.status, gold.stderr]).toEqual([
      1,
      `${policyFile}:2: EXTERNAL_DEFAULT_TIER: "gold" is not a tier of the policy (anonymous, free, pro, enterprise)\n`,
    ]);
    const badMap = await cli(["policy", "validate", policyFile], {
      env: { ...provider, JWT_TIER_MAP: "basic" },
    });
    expect(badMap.status).toBe(2);
    expect(badMap.stderr).toMatch(
      /^tollgate: the provider settings in the environment are invalid\n {2}JWT_TIER_MAP: /,
    );
  });

  it("validates an RLS folder (exit 0, the version the server reports) and names file, line and field of a bad one", async () => {
    const good = await cli(["rls", "validate", RLS_FOLDER, "--json"]);
    expect(good.status).toBe(0);
    const served = jsonOf<{ version: string }>(await cli(["rls", "show", "--json"]));
    expect(jsonOf<{ version: string; domains: string[] }>(good)).toMatchObject({
      valid: true,
      version: served.version,
    });
    const invalid = join(ROOT, "test/fixtures/rls/invalid");
    const bad = await cli(["rls", "validate", invalid]);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain(
      `${join(invalid, "bad_limit_unit.yaml")}:6: descriptors[0].rate_limit.unit: unknown unit "minutes"`,
    );
    for (const line of bad.stderr.trim().split("\n")) expect(line).toMatch(/^\/.+\.ya?ml:\d+: /);
  });
});

describe("tollgate users, lockout, sessions and limits", SLOW, () => {
  it("creates a user from a password on stdin, finds it by name or id, lists, re-tiers, disables and deletes it", async () => {
    const created = await cli(["users", "create", "Carla", "--tier", "pro", "--password-stdin", "--json"], {
      input: `${PASSWORD}\n`,
    });
    expect(created.status).toBe(0);
    const { user_id: id } = jsonOf<{ user_id: string }>(created);
    expect((await loginAs("carla", PASSWORD)).status).toBe(200);

    const byName = await cli(["users", "get", "CARLA"]);
    expect(byName.stdout).toMatch(new RegExp(`user_id: +${id}\\n`));
    expect(jsonOf(await cli(["users", "get", id, "--json"]))).toMatchObject({
      username: "Carla",
      tier: "pro",
    });
    const list = await cli(["users", "list"]);
    expect(list.stdout.split("\n")[0]).toMatch(/^USER_ID +USERNAME +TIER +DISABLED +SOURCE +CREATED_AT$/);
    expect(list.stdout).toMatch(new RegExp(`^${id} +Carla +pro +false +admin `, "m"));

    expect((await cli(["users", "tier", "carla", "enterprise"])).stdout).toBe(
      "Carla: tier pro -> enterprise\n",
    );
    expect((await cli(["users", "disable", "carla"])).status).toBe(0);
    expect((await loginAs("carla", PASSWORD)).status).toBe(401);
    expect((await cli(["users", "enable", "carla"])).status).toBe(0);
    expect((await loginAs("carla", PASSWORD)).status).toBe(200);

    const refused = await cli(["users", "delete", "carla"]);
    expect([refused.status, refused.stderr]).toEqual([
      2,
      "tollgate: deleting a user needs --yes when not on a terminal\n",
    ]);
    expect((await cli(["users", "delete", "carla", "--yes"])).status).toBe(0);
    const gone = await cli(["users", "get", "carla"]);
    expect([gone.status, gone.stderr]).toEqual([1, 'tollgate: no user with the id or username "carla"\n']);
  });

  it("refuses a taken name, an unknown tier and a password given nowhere, each with one line", async () => {
    const taken = await cli(["users", "create", "alice", "--tier", "free", "--password-stdin"], {
      input: PASSWORD,
    });
    expect([taken.status, taken.stderr]).toEqual([1, "tollgate: That username is taken\n"]);
    const tier = await cli(["users", "create", "dora", "--tier", "gold", "--password-stdin"], {
      input: PASSWORD,
    });
    expect(tier.status).toBe(1);
    expect(tier.stderr).toMatch(/^tollgate: tier: tier must be one of .*\n$/);
    const none = await cli(["users", "create", "dora", "--tier", "free"]);
    expect([none.status, none.stderr]).toEqual([
      2,
      "tollgate: standard input is not a terminal: give the password with --password-stdin\n",
    ]);
  });

  it("asks for the password twice on a terminal without echoing it, and refuses two that differ", async () => {
    // script(1) gives the CLI a terminal; each answer is typed once its prompt shows.
    const onTerminal = (answers: string[]) =>
      new Promise<Run>((resolve) => {
        const command = `node ${BIN} users create gina --tier free`;
        const child = spawn(findBinary("script"), ["-qec", command, "/dev/null"], {
          cwd: ROOT,
          env: { PATH: process.env.PATH ?? "", TOLLGATE_ADMIN_URL: tollgate.adminUrl, ADMIN_TOKEN },
        });
        let stdout = "";
        const prompts = ["new password: ", "again: "];
        child.stdout.on("data", (d) => {
          stdout += d;
          while (prompts.length > 0 && stdout.includes(prompts[0] as string)) {
            prompts.shift();
            child.stdin.write(`${answers.shift()}\r`);
          }
        });
        child.on("close", (status) => {
          printed.push(stdout);
          resolve({ status, stdout, stderr: "" });
        });
      });
    const differ = await onTerminal(["first-password-1", "second-password-2"]);
    expect(differ.status).toBe(2);
    expect(differ.stdout).toContain("tollgate: the two passwords differ; nothing changed");
    expect((await loginAs("gina", "first-password-1")).status).toBe(401);
    const same = await onTerminal([PASSWORD, PASSWORD]);
    expect(same.status).toBe(0);
    expect(same.stdout).toMatch(/created gina \(usr_[0-9a-f]+\), tier free/);
    for (const run of [differ, same]) {
      expect(run.stdout).not.toContain(PASSWORD);
      expect(run.stdout).not.toContain("password-1");
    }
    expect((await loginAs("gina", PASSWORD)).status).toBe(200);
  });

  it("sets a password that works at once, and clears a lockout so that the user logs in again", async () => {
    await cli(["users", "create", "erin", "--tier", "free", "--password-stdin"], {
      input: "first-password-1",
    });
    for (let i = 0; i < 3; i += 1) expect((await loginAs("erin", "wrong-password")).status).toBe(401);
    expect((await loginAs("erin", "first-password-1")).status).toBe(429);
    const cleared = await cli(["lockout", "clear", "erin"]);
    expect([cleared.status, cleared.stdout]).toEqual([0, "erin: lockout cleared\n"]);
    expect((await loginAs("erin", "first-password-1")).status).toBe(200);

    const changed = await cli(["users", "password", "erin", "--password-stdin"], { input: PASSWORD });
    expect(changed.stdout).toBe("erin: password changed, 1 session(s) revoked\n");
    expect((await loginAs("erin", "first-password-1")).status).toBe(401);
    expect((await loginAs("erin", PASSWORD)).status).toBe(200);
  });

  it("lists a user's sessions and revokes one by id, then every one", async () => {
    await cli(["users", "create", "fred", "--tier", "free", "--password-stdin"], { input: PASSWORD });
    await loginAs("fred", PASSWORD, "phone");
    await loginAs("fred", PASSWORD, "desk");
    const table = await cli(["sessions", "list", "fred"]);
    expect(table.stdout).toMatch(/^SESSION_ID +DEVICE_NAME +IP +CREATED_AT +LAST_ACCESSED +USER_AGENT\n/);
    expect(table.stdout).toMatch(/ phone /);
    const { sessions } = jsonOf<{ sessions: { session_id: string; device_name: string }[] }>(
      await cli(["sessions", "list", "fred", "--json"]),
    );
    const phone = sessions.find((s) => s.device_name === "phone")?.session_id as string;
    expect((await cli(["sessions", "revoke", "fred", phone])).stdout).toBe("fred: 1 session(s) revoked\n");
    const again = await cli(["sessions", "revoke", "fred", phone]);
    expect([again.status, again.stderr]).toEqual([1, "tollgate: No such session of this user\n"]);
    const left = jsonOf<{ sessions: { device_name: string }[] }>(
      await cli(["sessions", "list", "fred", "--json"]),
    );
    expect(left.sessions.map((s) => s.device_name)).toEqual(["desk"]);
    expect(jsonOf(await cli(["sessions", "revoke", "fred", "--json"]))).toMatchObject({ revoked: 1 });
    expect((await cli(["sessions", "list", "fred"])).stdout).toBe("(none)\n");
  });

  it("gets, sets and resets a user's own limits", async () => {
    const set = await cli(["limits", "set", "alice", "search=5/1m,50/1h", "orders=3/1h"]);
    expect([set.status, set.stdout]).toEqual([0, "alice: own limits search=5/1m,50/1h orders=3/1h\n"]);
    const table = await cli(["limits", "get", "alice"]);
    expect(table.stdout).toMatch(/^search +user +sliding-log +5\/1m +0 +5 /m);
    expect(table.stdout).toMatch(/^ +50\/1h +0 +50 /m);
    const json = jsonOf<{ limits: Record<string, { source: string; own_limits: string[] | null }> }>(
      await cli(["limits", "get", "demo-alice", "--json"]),
    );
    expect(json.limits.search).toMatchObject({ source: "user", own_limits: ["5/1m", "50/1h"] });
    expect(json.limits.general?.source).toBe("tier");
    const bad = await cli(["limits", "set", "alice", "nope=5/1m"]);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/^tollgate: nope: not a category of tier free/);
    const usage = await cli(["limits", "set", "alice", "search"]);
    expect(usage.status).toBe(2);
    // Each limit is read as the admin API reads it, before any call: spaces around commas are the list's.
    for (const limit of ["search=5/1m,010/1h", "search=+5/1m", "search=5/1m/1h", "search=1e3/1h"]) {
      const refused = await cli(["limits", "set", "alice", limit]);
      expect([limit, refused.status], refused.stderr).toEqual([limit, 2]);
      expect(refused.stderr).toMatch(/bad limit "[^"]+": expected <count>\/<duration> with a count from 1/);
    }
    const spaced = await cli(["limits", "set", "alice", "search=5/1m, 50/1h"]);
    // (The other categories' own limits follow in the store's order.)
    expect([spaced.status, spaced.stdout], spaced.stderr).toEqual([
      0,
      expect.stringContaining("search=5/1m,50/1h"),
    ]);
    expect((await cli(["limits", "reset", "alice"])).status).toBe(0);
    const after = jsonOf<{ limits: Record<string, { source: string }> }>(
      await cli(["limits", "get", "alice", "--json"]),
    );
    expect(after.limits.search?.source).toBe("tier");
  });
});

describe("tollgate check, policy show and policy reload", SLOW, () => {
  it("prints the decision and the headers of a dry run, counting nothing; exit 1 when denied", async () => {
    const token = ((await (await loginAs("bob_pro", "secret")).json()) as { access_token: string })
      .access_token;
    const args = ["check", "--method", "GET", "--path", "/api/search", "--token", token, "--ip", "10.1.2.3"];
    const first = await cli(args);
    expect(first.status).toBe(0);
    expect(first.stdout).toMatch(/^allow 200 \(ok\): tier pro, category search, 199 of 200 left\n/);
    expect(first.stdout).toContain("headers to the upstream:\n  x-user-id: demo-bob\n");
    expect(first.stdout).toMatch(/headers to the client:\n(.*\n)* {2}x-ratelimit-limit: 200\n/);
    // A dry run counts nothing: the second answer leaves as many as the first.
    expect((await cli(args)).stdout).toMatch(
      /^allow 200 \(ok\): tier pro, category search, 199 of 200 left\n/,
    );
    const json = jsonOf<{ decision: string; remaining: number }>(await cli([...args, "--json"]));
    expect(json).toMatchObject({ decision: "allow", remaining: 199 });

    const denied = await cli(["check", "--path", "/api/search", "--ip", "10.1.2.3"]);
    expect(denied.status).toBe(1);
    expect(denied.stdout).toMatch(/^deny 401 \(missing\)/);
    expect(denied.stdout).toContain("  www-authenticate: Bearer");
    expect((await cli(["check", "--method", "GET"])).status).toBe(2); // --path is required
  });

  it("prints a 429 with its Retry-After once the window is full, and exits 1", async () => {
    const token = ((await (await loginAs("ent_carol", "secret")).json()) as { access_token: string })
      .access_token;
    await cli(["limits", "set", "ent_carol", "orders=1/1h"]);
    const real = await fetch(`${tollgate.checkUrl}/ext_authz/api/orders`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
    });
    expect(real.status).toBe(200);
    const run = await cli(["check", "--method", "post", "--path", "/api/orders", "--token", token]);
    expect(run.status).toBe(1);
    expect(run.stdout).toMatch(
      /^deny 429 \(rate_limited\): tier enterprise, category orders, 0 of 1 left, retry after \d+ s\nheaders to the client:\n/,
    );
    expect(run.stdout).toMatch(/^ {2}retry-after: \d+$/m);
    await cli(["limits", "reset", "ent_carol"]);
  });

  it("shows the policy in force, reloads a changed file, and refuses an invalid one with its problems (exit 1)", async () => {
    const before = jsonOf<{ version: string }>(await cli(["policy", "show", "--json"]));
    expect((await cli(["policy", "show"])).stdout).toMatch(new RegExp(`^version: +${before.version}\\n`));
    writeFileSync(policyFile, DEFAULT_POLICY_YAML.replace("search: 200/1h", "search: 300/1h"));
    const reloaded = await cli(["policy", "reload"]);
    // POLICY_FILE is watched: the watch may have loaded the file before the command ran ("unchanged").
    const shown = /^Policy (?:reloaded|unchanged) \(version ([0-9a-f]{12})\)\n$/.exec(reloaded.stdout);
    expect(shown, reloaded.stdout).not.toBeNull();
    expect(before.version.startsWith(shown?.[1] ?? "")).toBe(false);
    expect(jsonOf<{ version: string }>(await cli(["policy", "show", "--json"])).version).not.toBe(
      before.version,
    );
    writeFileSync(policyFile, "tiers: { anonymous: { general: nope } }\ndefault: { category: general }\n");
    const refused = await cli(["policy", "reload"]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(
      /^tollgate: The policy file is invalid; the policy in force stays\n {2}.*tiers\.anonymous\.general: bad limit/,
    );
    writeFileSync(policyFile, DEFAULT_POLICY_YAML);
    expect((await cli(["policy", "reload", "--json"])).status).toBe(0);
  });
});

describe("exit codes and errors", SLOW, () => {
  it("exits 3 with one line when the admin token is refused or the admin API cannot be reached", async () => {
    const wrong = await cli(["users", "list", "--admin-token", "not-the-token-0123456789"]);
    expect([wrong.status, wrong.stderr]).toEqual([
      3,
      "tollgate: the admin API refused the admin token (ADMIN_TOKEN or --admin-token)\n",
    ]);
    const port = await freePort();
    const down = await cli(["users", "list"], { env: { TOLLGATE_ADMIN_URL: `http://127.0.0.1:${port}` } });
    expect([down.status, down.stderr]).toEqual([
      3,
      `tollgate: cannot reach the admin API at http://127.0.0.1:${port}: ECONNREFUSED\n`,
    ]);
    const flag = await cli(["users", "list", "--url", tollgate.adminUrl], {
      env: { TOLLGATE_ADMIN_URL: "http://127.0.0.1:9" },
    });
    expect(flag.status).toBe(0);
  });

  it("exits 2 on bad usage: no token, unknown command, bad option value, not a URL", async () => {
    const noToken = await cli(["users", "list"], { env: { ADMIN_TOKEN: "" } });
    expect([noToken.status, noToken.stderr]).toEqual([
      2,
      "tollgate: no admin token: set ADMIN_TOKEN or pass --admin-token\n",
    ]);
    expect((await cli(["users", "frobnicate"])).status).toBe(2);
    expect((await cli(["users", "list", "--limit", "0"])).status).toBe(2);
    // --limit is read as the admin API reads ?limit=: no hex, exponent, sign or leading zero.
    for (const limit of ["0x10", "1e2", "+5", "010", "5.0", "99999999999999999999"]) {
      const run = await cli(["users", "list", "--limit", limit]);
      expect([limit, run.status, run.stdout], run.stderr).toEqual([limit, 2, ""]);
      expect(run.stderr).toContain("a whole number from 1 to 500, in decimal digits only");
    }
    expect((await cli(["users"])).status).toBe(2);
    expect((await cli([])).status).toBe(2);
    const notUrl = await cli(["users", "list", "--url", "nowhere"]);
    expect([notUrl.status, notUrl.stderr]).toEqual([
      2,
      "tollgate: the admin URL is not a URL (--url or TOLLGATE_ADMIN_URL)\n",
    ]);
  });

  it("never repeats a password in the admin URL or a pasted admin token (exit 2, one line)", async () => {
    const withPassword = await cli(["users", "list"], {
      env: { TOLLGATE_ADMIN_URL: tollgate.adminUrl.replace("http://", "http://ops:UrlPw_SECRET@") },
    });
    expect([withPassword.status, withPassword.stderr]).toEqual([
      2,
      "tollgate: the admin URL must not hold a user or password (the admin token authenticates)\n",
    ]);
    const badPaste = await cli(["users", "list"], { env: { ADMIN_TOKEN: "AdminTok_SECRET_0123\n456789" } });
    expect(badPaste.status).toBe(2);
    expect(badPaste.stderr).toMatch(/^tollgate: the admin token holds a space, a line break/);
    for (const run of [withPassword, badPaste]) {
      expect(`${run.stdout}${run.stderr}`).not.toMatch(/SECRET/);
      expect(run.stderr.split("\n").filter(Boolean)).toHaveLength(1);
    }
    const pastedKey = await cli(["users", "get", `tg_0123456789abcdef_${"K".repeat(43)}`]);
    expect(pastedKey.status).toBe(1);
    expect(pastedKey.stderr).toBe("tollgate: no user with the id or username given\n");
  });

  it("answers --help on every command with exit 0", async () => {
    const paths: string[][] = [];
    const walk = (command: Command, path: string[]) => {
      paths.push(path);
      for (const sub of command.commands) walk(sub, [...path, sub.name()]);
    };
    walk(buildProgram("test"), []);
    expect(paths.length).toBeGreaterThan(25);
    for (const path of paths) {
      const run = await cli([...path, "--help"]);
      expect(run.status, path.join(" ")).toBe(0);
      expect(run.stdout, path.join(" ")).toMatch(
        new RegExp(`^Usage: tollgate${path.map((p) => ` ${p}`).join("")}`),
      );
    }
  });

  it("runs as package.json's bin: executable, and through npx in the checkout", () => {
    const direct = spawnSync(join(ROOT, BIN), ["--version"], { encoding: "utf8" });
    expect([direct.status, direct.stdout]).toEqual([
      0,
      `${JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version}\n`,
    ]);
    const npx = spawnSync("npx", ["--offline", "tollgate", "policy", "validate", policyFile], {
      cwd: ROOT,
      encoding: "utf8",
    });
    expect(npx.status).toBe(0);
    expect(npx.stdout).toContain("valid policy");
    // The image puts the same file on PATH.
    expect(readFileSync(join(ROOT, "Dockerfile"), "utf8")).toContain(
      `RUN ln -s /app/${BIN} /usr/local/bin/tollgate`,
    );
  });

  it("printed neither the admin token nor a stack trace in any run", () => {
    expect(printed.length).toBeGreaterThan(50);
    for (const text of printed) {
      expect(text).not.toContain(ADMIN_TOKEN);
      expect(text).not.toContain("not-the-token-0123456789");
      expect(text).not.toMatch(/\n\s+at .*\(|node:internal|Error \[/);
    }
  });
});

describe("tollgate completion", SLOW, () => {
  it("prints a bash script that completes commands, options and file names", async () => {
    const script = join(folder, "tollgate.bash");
    writeFileSync(script, (await cli(["completion", "bash"])).stdout);
    const complete = (...words: string[]) =>
      spawnSync(
        "bash",
        [
          "-c",
          `source ${script}; COMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; _tollgate; printf '%s\\n' "\${COMPREPLY[@]}"`,
        ],
        { cwd: ROOT, encoding: "utf8" },
      )
        .stdout.trim()
        .split("\n");
    expect(complete("tollgate", "")).toEqual(
      expect.arrayContaining(["policy", "users", "check", "completion", "--json"]),
    );
    expect(complete("tollgate", "users", "")).toEqual(
      expect.arrayContaining(["create", "get", "list", "tier", "password", "disable", "enable", "delete"]),
    );
    expect(complete("tollgate", "--json", "check", "--m")).toEqual(["--method"]);
    expect(complete("tollgate", "policy", "validate", "test/fixtures/policy/val")).toEqual([
      "test/fixtures/policy/valid.json",
    ]);
    expect(complete("tollgate", "completion", "")).toEqual(expect.arrayContaining(["bash", "zsh"]));
  });

  it("prints a zsh script whose function offers the same, with descriptions", async () => {
    const zsh = findBinary("zsh");
    const script = join(folder, "_tollgate");
    writeFileSync(script, (await cli(["completion", "zsh"])).stdout);
    expect(spawnSync(zsh, ["-n", script]).status).toBe(0);
    // zsh's completion system needs a terminal; its two entry points are stood in for, so the test
    // sees what the script hands them.
    const complete = (prefix: string, ...words: string[]) =>
      spawnSync(
        zsh,
        [
          "-c",
          `compdef() { :; }; _describe() { print -rl -- \${(P)4}; }; _files() { print files; }
source ${script}; words=(${words.map((w) => `'${w}'`).join(" ")}); CURRENT=${words.length}; PREFIX='${prefix}'; _tollgate`,
        ],
        { encoding: "utf8" },
      )
        .stdout.trim()
        .split("\n");
    expect(complete("", "tollgate", "limits", "")).toEqual([
      "get:every category's windows as they stand, and where the limits come from",
      "set:give a user its own limits for some categories (the others follow the tier)",
      "reset:a fresh start on the tier: the user's own limits and every window counted so far go",
    ]);
    expect(complete("--", "tollgate", "users", "create", "--")).toEqual(
      expect.arrayContaining([
        "--tier:the user's tier (one of the policy's)",
        "--json:print JSON for scripts instead of tables",
      ]),
    );
    expect(complete("", "tollgate", "rls", "validate", "")).toEqual(["files"]);
  });
});
