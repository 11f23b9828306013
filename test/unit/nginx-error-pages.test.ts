// nginx's own error pages (nginx/): every status they send to /_tollgate_error has a JSON body there
// in tollgate's shape, and every body there is for a status that gets it. The e2e answers are in
// test/e2e/nginx-errors.test.ts.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { INCLUDED_FILES } from "../../nginx/render.mjs";

const read = (file: string) => readFileSync(new URL(`../../nginx/${file}`, import.meta.url), "utf8");
const CONFIG = ["nginx.conf.template", ...INCLUDED_FILES].map(read).join("\n");
/** nginx answers its 494 (headers too large) as 400, error pages included. */
const SENT_AS: Record<string, string> = { "494": "400" };

/** The error_page directives that lead to /_tollgate_error, as written. */
const errorPages = [...CONFIG.matchAll(/^\s*error_page ([^;]+) \/_tollgate_error;/gm)].map((m) => m[1] ?? "");

/** The bodies of `map $status $tg_error_body`, by status (and "default"). */
function bodies(): Map<string, string> {
  const block = /map \$status \$tg_error_body \{\n([\s\S]*?)\n\s*\}/.exec(CONFIG)?.[1] ?? "";
  return new Map(
    [...block.matchAll(/^\s*(\d{3}|default) '([^']*)';$/gm)].map((m) => [m[1] ?? "", m[2] ?? ""]),
  );
}

describe("nginx's own error pages", () => {
  it("keep nginx's status: no error_page to /_tollgate_error sets one with =code", () => {
    expect(errorPages.length).toBeGreaterThan(0);
    for (const codes of errorPages) expect(codes).toMatch(/^\d{3}( \d{3})*$/);
  });

  it("give each status they route a JSON body of its own, and no status a body it never gets", () => {
    const routed = new Set(
      errorPages.flatMap((codes) => codes.split(" ")).map((code) => SENT_AS[code] ?? code),
    );
    const known = bodies();
    expect([...known.keys()].filter((status) => status !== "default").sort()).toEqual([...routed].sort());
    for (const [status, body] of known) {
      expect(JSON.parse(body), status).toEqual({
        error: expect.stringMatching(/^[a-z_]+$/),
        message: expect.any(String),
      });
    }
  });
});
