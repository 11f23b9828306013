// node envoy/render.mjs: --help, every problem in one line without a stack trace, nothing written on
// failure, addresses from flags or the environment. What it writes is checked in deploy-config.test.ts.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const FLAGS = [
  "--check-addr",
  "--grpc-addr",
  "--public-addr",
  "--upstream-addr",
  "--listen",
  "--admin",
  "--only",
];
const VARIABLES = ["CHECK_ADDR", "GRPC_ADDR", "PUBLIC_ADDR", "UPSTREAM_ADDR", "ENVOY_LISTEN", "ENVOY_ADMIN"];

/** Runs the tool with only PATH and `env` in its environment. */
function render(args: string[], env: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, ["envoy/render.mjs", ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", ...env },
    encoding: "utf8",
    timeout: 20_000,
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}
const outDir = () => join(mkdtempSync(join(tmpdir(), "tollgate-envoy-render-")), "out");
const noStack = (text: string) => expect(text).not.toMatch(/\n\s+at .*\(|node:internal|Error \[/);
const oneLine = (text: string) => expect(text.trim().split("\n"), text).toHaveLength(1);
type Node = Record<string, unknown>;
const node = (value: unknown): Node => (value ?? {}) as Node;
const first = (value: unknown): Node => node(Array.isArray(value) ? value[0] : undefined);
/** "host:port" of the first endpoint of each cluster of a rendered file. */
function endpoints(file: string): Record<string, string> {
  const clusters = node(node(parse(readFileSync(file, "utf8"))).static_resources).clusters as Node[];
  return Object.fromEntries(
    clusters.map((c) => {
      const lb = first(first(node(c.load_assignment).endpoints).lb_endpoints);
      const socket = node(node(node(lb.endpoint).address).socket_address);
      return [String(c.name), `${String(socket.address)}:${String(socket.port_value)}`];
    }),
  );
}

describe("node envoy/render.mjs", () => {
  it("explains itself with --help and -h: every flag and its environment variable", () => {
    for (const flag of ["--help", "-h"]) {
      const out = render([flag]);
      expect(out.status).toBe(0);
      expect(out.stdout).toMatch(/^usage: node envoy\/render\.mjs OUT_DIR/);
      for (const name of [...FLAGS, ...VARIABLES, "envoy.yaml", "envoy-grpc.yaml", "envoy-ratelimit.yaml"])
        expect(out.stdout).toContain(name);
    }
  });

  it("reports every missing address in one line, without a stack trace, and writes nothing", () => {
    const dir = outDir();
    const out = render([dir, "--public-addr", "127.0.0.1:8080"], { CHECK_ADDR: "" });
    expect(out.status).toBe(2);
    oneLine(out.stderr);
    noStack(out.stderr);
    for (const expected of ["--check-addr (or CHECK_ADDR)", "--grpc-addr (or GRPC_ADDR)", "--upstream-addr"])
      expect(out.stderr).toContain(expected);
    expect(out.stderr).not.toContain("--public-addr");
    expect(existsSync(dir)).toBe(false);
  });

  it("refuses an address that is not HOST:PORT, an unknown configuration and a missing directory, naming each", () => {
    const out = render(["--check-addr", "tollgate", "--only", "http,mesh"], {
      UPSTREAM_ADDR: "upstream:99999",
    });
    expect(out.status).toBe(2);
    oneLine(out.stderr);
    for (const expected of [
      "the output directory is missing",
      '--check-addr "tollgate" is not HOST:PORT',
      "--only mesh: not http, grpc or ratelimit",
      'UPSTREAM_ADDR "upstream:99999" is not HOST:PORT',
    ])
      expect(out.stderr).toContain(expected);
  });

  it("refuses an unknown flag in one line naming it", () => {
    const out = render([outDir(), "--chek-addr", "127.0.0.1:9191"]);
    expect(out.status).toBe(2);
    oneLine(out.stderr);
    expect(out.stderr).toContain("--chek-addr");
    noStack(out.stderr);
  });

  it("writes the three configurations with the addresses of the flags, or else of the environment", () => {
    const dir = outDir();
    const out = render(
      [dir, "--check-addr", "10.1.0.5:9191", "--grpc-addr", "[::1]:18081", "--listen", "127.0.0.1:18000"],
      { CHECK_ADDR: "ignored:1", PUBLIC_ADDR: "tollgate.internal:8080", UPSTREAM_ADDR: "127.0.0.1:8000" },
    );
    expect(out.stderr).toBe("");
    expect(out.status).toBe(0);
    const files = ["envoy.yaml", "envoy-grpc.yaml", "envoy-ratelimit.yaml"].map((f) => join(dir, f));
    expect(out.stdout.trim().split("\n")).toEqual(files);
    expect(endpoints(files[0] ?? "")).toEqual({
      tollgate_check: "10.1.0.5:9191",
      tollgate_public: "tollgate.internal:8080",
      upstream: "127.0.0.1:8000",
    });
    expect(endpoints(files[2] ?? "")).toMatchObject({
      tollgate_grpc: "::1:18081",
      tollgate_rls: "::1:18081",
    });
    const text = readFileSync(files[1] ?? "", "utf8");
    expect(text).toMatch(/^# Rendered by envoy\/render\.mjs from envoy\/envoy-grpc\.yaml/);
    expect(text).toContain("socket_address: { address: 127.0.0.1, port_value: 18000 }");
    // Envoy's admin interface on loopback by default.
    expect(text).toContain("socket_address: { address: 127.0.0.1, port_value: 9901 }");
  });

  it("writes one configuration with --only, needing only its addresses", () => {
    const dir = outDir();
    const out = render([dir, "--only", "grpc"], {
      GRPC_ADDR: "127.0.0.1:8081",
      PUBLIC_ADDR: "127.0.0.1:8080",
      UPSTREAM_ADDR: "127.0.0.1:8000",
    });
    expect(out.status).toBe(0);
    expect(out.stdout.trim()).toBe(join(dir, "envoy-grpc.yaml"));
    expect(existsSync(join(dir, "envoy.yaml"))).toBe(false);
  });
});
