// The process logger: JSON or readable lines by format and terminal, and writes that never block a stop.
import { spawn } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createProcessLogger, fdWriter } from "../../src/process/logger.js";

const LOGGER = fileURLToPath(new URL("../../dist/src/process/logger.js", import.meta.url));

/** Logs one line through a logger made as main.ts makes it, and returns what reached the file. */
async function logToFile(options: { format: "auto" | "json" | "pretty"; isTTY: boolean }): Promise<string> {
  const path = join(mkdtempSync(join(tmpdir(), "tollgate-log-")), "out");
  const fd = openSync(path, "w");
  const { logger, format } = await createProcessLogger({ level: "info", fd, ...options });
  logger.info({ event: "ready", password: "hunter2-secret" }, "tollgate ready");
  closeSync(fd);
  const text = readFileSync(path, "utf8");
  return `${format}\n${text}`;
}

describe("the process logger", () => {
  it("writes JSON lines when stdout is not a terminal, and with LOG_FORMAT=json on one", async () => {
    for (const options of [
      { format: "auto", isTTY: false },
      { format: "json", isTTY: true },
    ] as const) {
      const [format, line] = (await logToFile(options)).split("\n");
      expect(format).toBe("json");
      expect(JSON.parse(line ?? "")).toMatchObject({ level: "info", event: "ready", msg: "tollgate ready" });
    }
  });

  it("writes readable lines on a terminal (pino-pretty, a development dependency), secrets still redacted", async () => {
    const text = await logToFile({ format: "auto", isTTY: true });
    const [format, line] = text.split("\n");
    expect(format).toBe("pretty");
    expect(() => JSON.parse(line ?? "")).toThrow();
    expect(line).toMatch(/INFO.*tollgate ready/);
    expect(text).not.toContain("hunter2-secret");
  });

  it("drops writes once the reader is gone instead of throwing", () => {
    const writer = fdWriter(-1); // EBADF: as final as EPIPE
    expect(writer.write("lost\n")).toBe(true);
    expect(writer.broken()).toBe(true);
    expect(writer.write("lost too\n")).toBe(true);
  });

  it("lets the process exit when the last line before process.exit meets a closed pipe", async () => {
    const script = `
      const { createProcessLogger } = await import(${JSON.stringify(LOGGER)});
      const { logger } = await createProcessLogger({ level: "info", format: "json", isTTY: false });
      setTimeout(() => { logger.info("written into a closed pipe"); process.exit(0); }, 300);`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    child.stdout?.destroy();
    const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    const late = new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 8_000));
    const result = await Promise.race([exit, late]);
    if (result === "still running") child.kill("SIGKILL");
    expect(result).toBe(0);
  });
});
