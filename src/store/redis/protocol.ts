// The numbers the Lua scripts and the TypeScript that calls them agree on, defined once: the loader
// writes each as a `local NAME = value` line ahead of every script, and codec.ts reads them here.
export const LUA_CONSTANTS = {
  /** A rule's algorithm, the first character of its text (see lua/includes/layer.lua). */
  ALGO_SLIDING_LOG: 1,
  ALGO_SLIDING_COUNTER: 2,
  ALGO_GCRA: 3,
  /** Counts in the sliding counter's state ('C'), one fixed window at a time. */
  ALGO_FIXED_WINDOW: 4,
  /**
   * limit.lua's mode (ARGV[1], one digit), flags added together: FLAG_DRY_RUN decides without counting or renewing
   * anything; FLAG_EACH counts in each layer with room (Envoy's rate limit service) instead of in
   * every layer or in none (the HTTP check); FLAG_IDENTITY: the call reads a session and counts
   * the user's layer after the fixed ones.
   */
  FLAG_DRY_RUN: 1,
  FLAG_EACH: 2,
  FLAG_IDENTITY: 4,
  /** A fixed layer's digit in limit.lua's arguments, added together: in shadow mode; its record expires. */
  LAYER_SHADOW: 1,
  LAYER_EXPIRING: 2,
  /** limit.lua's reply status. */
  STATUS_OK: 0,
  STATUS_NO_SESSION: 1,
  STATUS_USER_INACTIVE: 2,
  STATUS_UNKNOWN_TIER: 3,
  STATUS_REFUSED_BEFORE_IDENTITY: 4,
  /**
   * The first byte of an identity's proof argument in limit.lua (a session's is its idle lifetime,
   * a digit): an API key's hash (and, _USED, write its last use), a provider subject's token tier.
   */
  PROOF_KEY: 107,
  PROOF_KEY_USED: 75,
  PROOF_SUBJECT: 120,
  /** session_touch's answer (lua/includes/session.lua), also sessionTouch's reply. */
  SESSION_VALID: 1,
  SESSION_GONE: 0,
  SESSION_USER_INACTIVE: -1,
} as const;

/** The Lua lines that define every constant. */
export const luaConstants = (): string =>
  Object.entries(LUA_CONSTANTS)
    .map(([name, value]) => `local ${name} = ${value}`)
    .join("\n");
