// Reads the environment's variables one at a time, by their known names, collecting every problem.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { hostProblem } from "./hosts.js";
import { MIN_SECRET_BYTES, weakSecretReason } from "./secrets.js";
import type { SettingName } from "./setting-names.js";

export type Env = Record<string, string | undefined>;

/** Reads one variable at a time, collecting problems instead of throwing on the first. */
/** What a bearer token in an Authorization header can be: visible ASCII (the tollgate command checks the same). */
export const BEARER_TOKEN_TEXT = /^[\x21-\x7e]+$/;

export class Reader {
  readonly problems: string[] = [];
  /** Every port setting read, in order: each is a listener's, and no two listeners share a port. */
  readonly ports: { name: SettingName; value: number }[] = [];
  constructor(private readonly env: Env) {}

  raw(name: SettingName): string | undefined {
    const value = this.env[name];
    return value === undefined || value.trim() === "" ? undefined : value.trim();
  }

  int(name: SettingName, fallback: number, min: number, max: number): number {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
      this.problems.push(`${name}: expected a whole number from ${min} to ${max}, got "${value}"`);
      return fallback;
    }
    return Number(value);
  }

  port(name: SettingName, fallback: number): number {
    const value = this.int(name, fallback, 1, 65535);
    this.ports.push({ name, value });
    return value;
  }

  host(name: SettingName, fallback: string): string {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    const problem = hostProblem(value);
    if (problem === undefined) return value;
    this.problems.push(`${name}: ${problem}`);
    return fallback;
  }

  oneOf<T extends string>(name: SettingName, allowed: readonly T[], fallback: T): T {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    const found = allowed.find((a) => a.toLowerCase() === value.toLowerCase());
    if (found === undefined) {
      this.problems.push(`${name}: expected one of ${allowed.join(", ")}, got "${value}"`);
      return fallback;
    }
    return found;
  }

  file(name: SettingName): string | undefined {
    const path = this.raw(name);
    if (path === undefined) return undefined;
    try {
      return readFileSync(path, "utf8");
    } catch (error) {
      this.problems.push(
        `${name}: cannot read "${path}" (${(error as NodeJS.ErrnoException).code ?? "error"})`,
      );
      return undefined;
    }
  }

  /**
   * A secret given in the environment: never echoed in a message. `alwaysMinBytes`: the length is
   * required outside production too (a signing key); otherwise only production requires it.
   */
  secret(
    name: SettingName,
    production: boolean,
    alwaysMinBytes: boolean,
  ): { value: string; generated: boolean } {
    const value = this.raw(name);
    if (value === undefined) {
      if (production) this.problems.push(`${name}: required when NODE_ENV=production`);
      return { value: randomBytes(32).toString("base64url"), generated: true };
    }
    this.strongEnough(name, value, production, { minBytes: MIN_SECRET_BYTES, always: alwaysMinBytes });
    return { value, generated: false };
  }

  /**
   * A token that clients send as `Authorization: Bearer <token>` (ADMIN_TOKEN, METRICS_TOKEN): visible
   * ASCII only, anywhere. A space ends the token in the header, and other characters arrive as other
   * bytes (node reads header bytes as latin1), so that every call would get 401, the tollgate command
   * refusing such a token too: the admin API would be out of reach until a restart.
   */
  bearerToken(name: SettingName, value: string): void {
    if (!BEARER_TOKEN_TEXT.test(value))
      this.problems.push(
        `${name}: use visible ASCII characters only (no space, no character beyond ASCII): a bearer token in an Authorization header carries no other`,
      );
  }

  /** Production refuses short, published and predictable secrets; elsewhere only what `always` asks. */
  strongEnough(
    name: string,
    value: string,
    production: boolean,
    length: { minBytes: number; always: boolean },
  ): void {
    if ((production || length.always) && Buffer.byteLength(value, "utf8") < length.minBytes) {
      this.problems.push(`${name}: must be at least ${length.minBytes} bytes long`);
    } else if (production) {
      this.refuseWeak(name, value);
    }
  }

  /** Production refuses secrets published in the repository or too predictable to be secret. */
  refuseWeak(name: string, value: string): void {
    const reason = weakSecretReason(value);
    if (reason !== undefined) this.problems.push(`${name}: ${reason}`);
  }
}
