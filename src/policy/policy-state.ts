// The policy in force, swapped whole on a reload: a check reads it once, so none sees half of two.
import { createHash } from "node:crypto";
import { type PathWatch, watchPath } from "../config/file-watch.js";
import { limitText } from "../config/rules.js";
import type { Rule } from "../ratelimit/types.js";
import { type CompiledPolicy, compilePolicy } from "./compile.js";
import { type Policy, PolicyError, type PolicySource, policyFromSource, readPolicySource } from "./policy.js";

export type ActivePolicy = {
  policy: Policy;
  compiled: CompiledPolicy;
  /** A hash of the policy's meaning (not of the file's spelling): the same limits, the same version. */
  version: string;
  /** "built-in policy" or "POLICY_FILE <path>". */
  source: string;
  loadedAt: Date;
};

export type ReloadResult =
  | { ok: true; changed: boolean; active: ActivePolicy }
  | { ok: false; problems: string[]; active: ActivePolicy };

export type PolicyState = {
  current(): ActivePolicy;
  /**
   * Re-reads POLICY_FILE (the built-in policy when unset), or takes the text another process read
   * from it at `readAt` (WORKERS): a valid one replaces the policy at once, an invalid one changes nothing.
   */
  reload(read?: { source: PolicySource; readAt: number }): ReloadResult;
  /** Called after every reload that changed the policy. */
  onChange(listener: (active: ActivePolicy) => void): void;
  /** Reloads on every change of POLICY_FILE (debounced; a ConfigMap's swap included), until `close`; nothing without one. */
  watch(onReload: (result: ReloadResult) => void): void;
  close(): void;
};

const ruleDocument = (rule: Rule) => ({
  algorithm: rule.algorithm,
  limits: rule.windows.map(limitText),
});

/** The policy as JSON, the same whatever the file's spelling: what GET /admin/policy shows and the version hashes. */
export function policyDocument(policy: Policy) {
  return {
    mode: policy.ipMode,
    ip: policy.ip === undefined ? null : ruleDocument(policy.ip),
    tiers: Object.fromEntries(
      [...policy.tiers].map(([tier, rules]) => [
        tier,
        {
          mode: policy.modes.get(tier) ?? "enforce",
          categories: Object.fromEntries(
            [...rules].map(([category, rule]) => [category, ruleDocument(rule)]),
          ),
        },
      ]),
    ),
    routes: policy.routes.map((r) => ({
      method: r.method ?? null,
      path: r.prefix ? `${r.path}/*` : r.path,
      category: r.limited ? r.category : null,
      token: r.token,
      limit: r.limited,
    })),
    default: {
      category: policy.defaultRule.category,
      token: policy.defaultRule.token,
      limit: policy.defaultRule.limited,
    },
  };
}

/** What GET /admin/policy calls the policy's version: `tollgate policy validate` prints it before a reload. */
export const policyVersion = (policy: Policy): string =>
  createHash("sha256")
    .update(JSON.stringify(policyDocument(policy)))
    .digest("hex")
    .slice(0, 12);

function activate(policy: Policy, source: string, loadedAt = new Date()): ActivePolicy {
  return {
    policy,
    compiled: compilePolicy(policy),
    version: policyVersion(policy),
    source,
    loadedAt,
  };
}

export function createPolicyState(options: {
  file: string | undefined;
  initial: Policy;
  /**
   * What settings outside the policy need of it (the tiers the provider settings name), as problems:
   * a reload by any path (the admin call, SIGHUP, a worker following another, the file watch) with one
   * is refused as an invalid file is, and the policy in force stays.
   */
  requirements?: (policy: Policy) => string[];
}): PolicyState {
  const source = options.file === undefined ? "built-in policy" : `POLICY_FILE ${options.file}`;
  let active = activate(options.initial, source);
  const listeners: ((active: ActivePolicy) => void)[] = [];
  let watcher: PathWatch | undefined;
  const state: PolicyState = {
    current: () => active,
    reload(read) {
      let policy: Policy;
      try {
        policy = policyFromSource(options.file, read?.source ?? readPolicySource(options.file));
      } catch (error) {
        if (error instanceof PolicyError) return { ok: false, problems: error.problems, active };
        throw error;
      }
      const unmet = options.requirements?.(policy) ?? [];
      if (unmet.length > 0) return { ok: false, problems: unmet.map((p) => `${source}: ${p}`), active };
      const next = activate(policy, source, read === undefined ? undefined : new Date(read.readAt));
      if (next.version === active.version) return { ok: true, changed: false, active };
      active = next;
      for (const listener of listeners) listener(active);
      return { ok: true, changed: true, active };
    },
    onChange(listener) {
      listeners.push(listener);
    },
    watch(onReload) {
      const file = options.file;
      if (file !== undefined) watcher = watchPath(file, () => onReload(state.reload()));
    },
    close() {
      watcher?.close();
    },
  };
  return state;
}
