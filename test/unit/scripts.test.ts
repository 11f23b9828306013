// The Lua scripts are declared once (src/store/redis/loader.ts): every file is declared, every
// declaration has its file, and each file says how many KEYS it takes as its name does.
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { LUA_DIR, SCRIPTS, type ScriptName, scriptFile } from "../../src/store/redis/loader.js";

const files = readdirSync(LUA_DIR).filter((f) => f.endsWith(".lua"));

describe("the Lua scripts", () => {
  it("are all declared, and every declaration has its file", () => {
    const declared = (Object.keys(SCRIPTS) as ScriptName[]).map(scriptFile).sort();
    expect(files.sort()).toEqual(declared);
  });

  it("open with a comment naming their KEYS, ARGV and reply", () => {
    for (const file of files) {
      const text = readFileSync(new URL(file, LUA_DIR), "utf8");
      expect(text.startsWith("-- "), file).toBe(true);
      expect(text, file).toMatch(/-- KEYS/);
      expect(text, file).toMatch(/-- (ARGV|Reply)/);
    }
  });

  it("use only the KEYS their declared count gives them", () => {
    for (const [name, count] of Object.entries(SCRIPTS) as [ScriptName, number | "varies"][]) {
      if (count === "varies") continue;
      const text = readFileSync(new URL(scriptFile(name), LUA_DIR), "utf8");
      const used = [...text.matchAll(/KEYS\[(\d+)\]/g)].map((m) => Number(m[1]));
      expect(Math.max(...used), name).toBeLessThanOrEqual(count);
    }
  });
});
