// One shape for every "these inputs are wrong" error (settings, policy, users file), one formatter of zod issues.
import type { z } from "zod";

/** A list of problems, one line each naming what is wrong; the message lists them under `title`. */
export class ProblemsError extends Error {
  readonly problems: string[];
  constructor(title: string, problems: string[]) {
    super(`${title}:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = new.target.name;
    this.problems = problems;
  }
}

/** `tiers.free.general`, `routes[0].method`, or "(top level)". */
export function fieldPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return "(top level)";
  return path
    .map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`))
    .join("");
}

/** One line per zod issue, each naming its field. */
export function problemsOf(error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    if (issue.code === "unrecognized_keys") {
      const where = issue.path.length > 0 ? `${fieldPath(issue.path)}: ` : "";
      return `${where}unknown key${issue.keys.length > 1 ? "s" : ""} ${issue.keys.map((k) => `"${k}"`).join(", ")}`;
    }
    return `${fieldPath(issue.path)}: ${issue.message}`;
  });
}
