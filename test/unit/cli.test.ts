// The command-line tools: --help, every problem in one message without a stack trace, no side effects on failure.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { STAMP, staleReason } from "../../scripts/ensure-built.mjs";
import { freePort, waitFor } from "../support/ports.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

function run(args: string[], input?: string): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, args, { cwd: ROOT, input, encoding: "utf8", timeout: 20_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

const noStack = (text: string) => expect(text).not.toMatch(/\n\s+at .*\(|node:internal|Error \[/);

const RENDER_VALUES = [
  "LISTEN=127.0.0.1:8081",
  "CHECK_ADDR=127.0.0.1:9191",
  "PUBLIC_ADDR=127.0.0.1:8080",
  "UPSTREAM_ADDR=127.0.0.1:8000",
];

describe("node nginx/render.mjs", () => {
  it("explains itself with --help", () => {
    const out = run(["nginx/render.mjs", "--help"]);
    expect(out.status).toBe(0);
    for (const name of [
      "LISTEN",
      "CHECK_ADDR",
      "PUBLIC_ADDR",
      "UPSTREAM_ADDR",
      "PREFIX",
      "WORKERS",
      "CHECK_TIMEOUT",
    ]) {
      expect(out.stdout).toContain(name);
    }
  });

  it("reports every missing value and unknown name in one message, without a stack trace, and writes nothing", () => {
    const dir = join(mkdtempSync(join(tmpdir(), "tollgate-render-")), "out");
    const out = run(["nginx/render.mjs", dir, "LISTEN=127.0.0.1:8081", "CHEK_ADDR=x", "oops"]);
    expect(out.status).toBe(2);
    for (const expected of [
      "CHECK_ADDR",
      "PUBLIC_ADDR",
      "UPSTREAM_ADDR",
      "PREFIX",
      "unknown name CHEK_ADDR",
      '"oops"',
    ]) {
      expect(out.stderr).toContain(expected);
    }
    noStack(out.stderr);
    expect(existsSync(dir)).toBe(false);
  });

  it("refuses an empty value (an unset shell variable) as it refuses a missing one, and writes nothing", () => {
    const dir = join(mkdtempSync(join(tmpdir(), "tollgate-render-")), "out");
    const out = run(["nginx/render.mjs", dir, ...RENDER_VALUES.slice(1), "LISTEN=", `PREFIX=${dir}`]);
    expect(out.status).toBe(2);
    expect(out.stderr).toContain("no value after LISTEN=");
    expect(out.stderr).not.toContain("missing");
    noStack(out.stderr);
    expect(existsSync(dir)).toBe(false);
  });

  it("writes nginx.conf and its included files when every value is given", () => {
    const dir = join(mkdtempSync(join(tmpdir(), "tollgate-render-")), "out");
    const out = run(["nginx/render.mjs", dir, ...RENDER_VALUES, `PREFIX=${dir}`]);
    expect(out.status).toBe(0);
    expect(out.stdout.trim()).toBe(join(dir, "nginx.conf"));
    const conf = readFileSync(join(dir, "nginx.conf"), "utf8");
    expect(conf).not.toMatch(/\{\{[A-Z_]+\}\}/);
    expect(conf).toContain("server 127.0.0.1:9191;");
    for (const file of ["tollgate-check.conf", "tollgate-limit-headers.conf", "tollgate-errors.conf"])
      expect(existsSync(join(dir, file))).toBe(true);
  });
});

describe("the other tools", () => {
  const tools: [string, string[]][] = [
    ["tollgate", ["dist/src/main.js"]],
    ["upstream", ["dist/upstream/main.js"]],
    ["hash-password", ["scripts/hash-password.mjs"]],
    ["bench", ["bench/run.mjs"]],
    ["envoy/render.mjs", ["envoy/render.mjs"]],
  ];

  it.each(tools)("%s answers --help and -h with its usage", (_name, args) => {
    for (const flag of ["--help", "-h"]) {
      const out = run([...args, flag]);
      expect(out.status, flag).toBe(0);
      expect(out.stdout, flag).toMatch(/usage/);
    }
  });

  it.each(tools)("%s refuses an unknown flag in one line, without a stack trace", (name, args) => {
    const out = run([...args, "--no-such-flag"]);
    expect(out.status).not.toBe(0);
    const lines = out.stderr.trim().split("\n");
    // The problem, and at most a pointer to --help on a line of its own.
    expect(lines.length, out.stderr).toBeLessThanOrEqual(2);
    expect(lines[0]).toMatch(/\S/);
    // hash-password echoes no argument at all: one may be a password typed in the wrong place.
    if (name !== "hash-password") expect(lines[0]).toContain("--no-such-flag");
    noStack(out.stderr);
  });

  it("hash-password never takes the password as an argument, so it cannot echo or store it", () => {
    const out = run(["scripts/hash-password.mjs", "hunter2-password"]);
    expect(out.status).toBe(2);
    expect(`${out.stdout}${out.stderr}`).not.toContain("hunter2-password");
  });

  it("hash-password asks twice on a terminal without echoing what is typed", async () => {
    // script(1) (util-linux) gives the tool a terminal; each answer is typed only once its prompt shows.
    const child = spawn("script", ["-qec", `${process.execPath} scripts/hash-password.mjs`, "/dev/null"], {
      cwd: ROOT,
      stdio: ["pipe", "pipe", "pipe"],
    });
    let screen = "";
    child.stdout.on("data", (d: Buffer) => {
      screen += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    try {
      await waitFor(async () => screen.includes("password: "), 10_000, "the first prompt");
      child.stdin.write("hunter2-typed\r");
      await waitFor(async () => screen.includes("again: "), 10_000, "the second prompt");
      child.stdin.write("hunter2-typed\r");
      await waitFor(async () => /scrypt\$/.test(screen), 10_000, "the hash");
      expect(await exited).toBe(0);
      expect(screen).toMatch(/scrypt\$\d+\$\d+\$\d+\$[\w-]+\$[\w-]+/);
      expect(screen).not.toContain("hunter2");
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("hash-password hashes what comes on stdin and prints only the hash", () => {
    const out = run(["scripts/hash-password.mjs"], "hunter2-password\n");
    expect(out.status).toBe(0);
    expect(out.stdout).toMatch(/^scrypt\$\d+\$\d+\$\d+\$[\w-]+\$[\w-]+\n$/);
    expect(`${out.stdout}${out.stderr}`).not.toContain("hunter2-password");
  });
});

describe("npm run upstream", () => {
  /** Starts the upstream in `cwd` with only `env` and PATH; answers the port its /health answered on. */
  async function upstreamPort(cwd: string, env: Record<string, string>, ports: number[]): Promise<number> {
    const child = spawn(process.execPath, [join(ROOT, "dist/upstream/main.js")], {
      cwd,
      env: { PATH: process.env.PATH ?? "", ...env },
      stdio: "ignore",
    });
    try {
      let found = 0;
      await waitFor(
        async () => {
          for (const port of ports) {
            if ((await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined))?.ok) found = port;
          }
          return found !== 0;
        },
        10_000,
        "the upstream",
      );
      return found;
    } finally {
      child.kill("SIGKILL");
    }
  }

  it("reads UPSTREAM_PORT from .env in its working directory, like tollgate, the environment winning", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-upstream-env-"));
    const [fromFile, fromEnv] = [await freePort(), await freePort()];
    writeFileSync(join(dir, ".env"), `UPSTREAM_PORT=${fromFile}\nHOST=127.0.0.1\n`);
    expect(await upstreamPort(dir, {}, [fromFile, fromEnv])).toBe(fromFile);
    expect(await upstreamPort(dir, { UPSTREAM_PORT: String(fromEnv) }, [fromFile, fromEnv])).toBe(fromEnv);
  });
});

describe("npm start's build step (scripts/ensure-built.mjs)", () => {
  it("builds when dist/ has no complete build or a source is newer, and not otherwise", () => {
    const root = mkdtempSync(join(tmpdir(), "tollgate-built-"));
    mkdirSync(join(root, "src"));
    writeFileSync(join(root, "src", "main.ts"), "");
    expect(staleReason(root)).toMatch(/no complete build/);
    mkdirSync(join(root, "dist"));
    writeFileSync(join(root, STAMP), "");
    const past = new Date(Date.now() - 60_000);
    utimesSync(join(root, "src", "main.ts"), past, past);
    utimesSync(join(root, "src"), past, past);
    expect(staleReason(root)).toBeUndefined();
    writeFileSync(join(root, "src", "main.ts"), "// edited");
    expect(staleReason(root)).toMatch(/sources changed/);
  });
});
