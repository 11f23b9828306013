// POLICY_FILE and RLS_CONFIG reloaded without a restart when they are a mounted Kubernetes ConfigMap:
// the kubelet never writes the files a path names, it writes a new timestamped folder and swaps the
// `..data` symlink the names go through. Laid out here as the kubelet lays it out (its AtomicWriter).
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createTollgate, type Tollgate } from "../../src/app.js";
import { loadConfig } from "../../src/config/env.js";
import { watchPath } from "../../src/config/file-watch.js";
import { DEFAULT_POLICY_YAML, loadPolicy } from "../../src/policy/policy.js";
import { createLogger } from "../../src/process/logger.js";
import { createMemoryStore } from "../../src/store/store.js";
import { ADMIN_TOKEN, JWT_SECRET } from "../support/secrets.mjs";

/** A ConfigMap volume: `name -> ..data/name`, `..data -> ..<stamp>`; `update` swaps in new contents. */
function configMapVolume(files: Record<string, string>) {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-configmap-"));
  let generation = 0;
  const writeGeneration = (contents: Record<string, string>): string => {
    generation += 1;
    const stamp = `..2026_01_01_00_00_0${generation}.${process.pid}`;
    mkdirSync(join(dir, stamp));
    for (const [name, text] of Object.entries(contents)) writeFileSync(join(dir, stamp, name), text);
    return stamp;
  };
  let current = writeGeneration(files);
  symlinkSync(current, join(dir, "..data"));
  for (const name of Object.keys(files)) symlinkSync(join("..data", name), join(dir, name));
  return {
    dir,
    update(contents: Record<string, string>) {
      const previous = current;
      current = writeGeneration(contents);
      symlinkSync(current, join(dir, "..data_tmp"));
      renameSync(join(dir, "..data_tmp"), join(dir, "..data"));
      rmSync(join(dir, previous), { recursive: true });
    },
  };
}

const waitFor = async (what: string, condition: () => boolean, ms = 5_000): Promise<void> => {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
};

const withFreeSearch = (limit: string) =>
  DEFAULT_POLICY_YAML.replace(/^( {2}free: .*search: )[^,]+,/m, `$1${limit},`);
const rlsYaml = (requests: number) =>
  `domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: ${requests} }\n`;

describe("watchPath", () => {
  const closers: (() => void)[] = [];
  afterEach(() => {
    for (const close of closers.splice(0)) close();
  });

  it("calls back once after a ConfigMap swap, for a file of the volume and for the volume folder", async () => {
    const volume = configMapVolume({ "policy.yaml": "a: 1\n" });
    let fileCalls = 0;
    let folderCalls = 0;
    closers.push(watchPath(join(volume.dir, "policy.yaml"), () => (fileCalls += 1), 50).close);
    closers.push(watchPath(volume.dir, () => (folderCalls += 1), 50).close);
    volume.update({ "policy.yaml": "a: 2\n" });
    await waitFor("both calls", () => fileCalls > 0 && folderCalls > 0);
    await new Promise((resolve) => setTimeout(resolve, 200));
    // The swap's several steps (a folder, a link, a rename, a removal) settle into one call each.
    expect([fileCalls, folderCalls]).toEqual([1, 1]);
  });

  it("ignores other files written beside a watched file, and sees a save over it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-watch-"));
    const file = join(dir, "policy.yaml");
    writeFileSync(file, "a: 1\n");
    let calls = 0;
    closers.push(watchPath(file, () => (calls += 1), 50).close);
    writeFileSync(join(dir, "tollgate.log"), "a log line\n");
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(calls).toBe(0);
    // An editor's save: a new file renamed over the old one.
    writeFileSync(join(dir, "policy.yaml.tmp"), "a: 2\n");
    renameSync(join(dir, "policy.yaml.tmp"), file);
    await waitFor("the call", () => calls > 0);
  });
});

describe("a tollgate whose POLICY_FILE and RLS_CONFIG are mounted ConfigMaps", () => {
  let tollgate: Tollgate | undefined;
  afterEach(() => tollgate?.close());

  function start(env: Record<string, string>) {
    const config = loadConfig({ JWT_SECRET, ADMIN_TOKEN, LOG_LEVEL: "info", ...env });
    const lines: string[] = [];
    tollgate = createTollgate({
      config,
      policy: loadPolicy(config.policyFile),
      store: createMemoryStore(),
      logger: createLogger("info", { write: (line: string) => void lines.push(line) }),
    });
    const events = (name: string) =>
      lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((e) => e.event === name);
    return { tollgate, events };
  }

  it("applies a new policy when the ConfigMap changes, logged once, and keeps it through an invalid one", async () => {
    const volume = configMapVolume({ "policy.yaml": withFreeSearch("20/1h") });
    const { tollgate, events } = start({ POLICY_FILE: join(volume.dir, "policy.yaml") });
    const searchLimit = () =>
      tollgate.policy.current().policy.tiers.get("free")?.get("search")?.windows[0]?.limit;
    expect(searchLimit()).toBe(20);
    volume.update({ "policy.yaml": withFreeSearch("7/1h") });
    await waitFor("the new policy", () => searchLimit() === 7);
    expect(events("policy_reloaded")).toMatchObject([{ trigger: "file", changed: true }]);
    volume.update({ "policy.yaml": withFreeSearch("seven") });
    await waitFor("the refusal", () => events("policy_invalid").length > 0);
    expect(events("policy_invalid")[0]).toMatchObject({ trigger: "file" });
    expect(searchLimit()).toBe(7);
  });

  it("applies a new RLS configuration when the ConfigMap mounted as the RLS_CONFIG folder changes", async () => {
    const volume = configMapVolume({ "edge.yaml": rlsYaml(5) });
    const { tollgate, events } = start({ RLS_CONFIG: volume.dir });
    const limit = () =>
      tollgate.rls?.state.current().domains.get("edge")?.root.nodes[0]?.limit?.requestsPerUnit;
    expect(limit()).toBe(5);
    volume.update({ "edge.yaml": rlsYaml(9) });
    await waitFor("the new configuration", () => limit() === 9);
    expect(events("rls_config_reloaded")).toMatchObject([{ trigger: "file", changed: true }]);
  });
});
