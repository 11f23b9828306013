// Variables of the environment that look like tollgate's but are none of its settings (REDIS_ULR,
// LOG_LEVLE, redis_url): each is ignored, so start-up warns about it, naming the closest setting.

export type UnknownSetting = {
  variable: string;
  closest: string;
  /** Close enough to be a misspelling of `closest` (rather than a name tollgate merely shares a prefix with). */
  likelyTypo: boolean;
};

/**
 * Prefixes of tollgate's settings, and of the front ends' to come: another variable under one is a
 * mistake. Not GRPC_: gRPC libraries read GRPC_TRACE, GRPC_VERBOSITY, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH….
 */
const PREFIXES = [
  "REDIS_",
  "JWT_",
  "JWKS_",
  "SESSION_",
  "ADMIN_",
  "METRICS_",
  "CHECK_",
  "LOG_",
  "LOGIN_",
  "POLICY_",
  "USERS_",
  "TRUSTED_",
  "FAILURE_",
  "DRAIN_",
  "DENIAL_",
  "IPV6_",
  "RLS_",
  "OIDC_",
];

/** Variables other software sets under one of those prefixes. */
const OTHERS = new Set(["SESSION_MANAGER"]);

/** What other clients of Redis are configured with, and what tollgate reads instead. */
const ALIASES: Record<string, string> = {
  REDIS_HOST: "REDIS_URL",
  REDIS_HOSTNAME: "REDIS_URL",
  REDIS_PORT: "REDIS_URL",
  REDIS_DB: "REDIS_URL",
  REDIS_DATABASE: "REDIS_URL",
  REDIS_PREFIX: "REDIS_KEY_PREFIX",
};

/**
 * A Kubernetes service link (REDIS_SERVICE_HOST, REDIS_PORT_6379_TCP_ADDR, REDIS_PORT=tcp://…): the
 * kubelet sets them for every service of the namespace, a Redis service's among them.
 */
function serviceLink(name: string, value: string): boolean {
  return (
    /_SERVICE_(HOST|PORT)(_[A-Z0-9_]+)?$/.test(name) ||
    /_PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$/.test(name) ||
    (/_PORT$/.test(name) && /^(tcp|udp|sctp):\/\//.test(value))
  );
}

/** Edits (insert, delete, replace, swap two neighbours) between two names. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  const at = (i: number, j: number): number => d[i]?.[j] ?? Number.POSITIVE_INFINITY;
  for (let i = 1; i <= a.length; i += 1) {
    for (let j = 1; j <= b.length; j += 1) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, at(i - 2, j - 2) + 1);
      (d[i] as number[])[j] = best;
    }
  }
  return at(a.length, b.length);
}

/** Edits a misspelling may take: one in a short name (HOME is not HOST), two in a longer one. */
const typoBound = (name: string): number => (name.length <= 5 ? 1 : 2);

function closestOf(name: string, known: readonly string[]): { closest: string; distance: number } {
  let best = { closest: known[0] ?? "", distance: Number.POSITIVE_INFINITY };
  for (const candidate of known) {
    const distance = editDistance(name, candidate);
    if (distance < best.distance) best = { closest: candidate, distance };
  }
  return best;
}

/** The variables of `env` that look like settings but are not among `known`, each with the closest one. */
export function unknownSettings(
  env: Record<string, string | undefined>,
  known: readonly string[],
): UnknownSetting[] {
  const settings = new Set(known);
  const found: UnknownSetting[] = [];
  for (const [variable, value] of Object.entries(env)) {
    if (settings.has(variable) || value === undefined) continue;
    const upper = variable.toUpperCase();
    // A lower-case name (npm_config_…, http_proxy) is someone else's unless it spells a setting.
    if (variable !== upper) {
      if (settings.has(upper)) found.push({ variable, closest: upper, likelyTypo: true });
      continue;
    }
    if (OTHERS.has(variable) || serviceLink(variable, value)) continue;
    const alias = ALIASES[variable];
    if (alias !== undefined) {
      found.push({ variable, closest: alias, likelyTypo: false });
      continue;
    }
    const { closest, distance } = closestOf(variable, known);
    const likelyTypo = distance <= typoBound(closest);
    if (likelyTypo || PREFIXES.some((prefix) => variable.startsWith(prefix)))
      found.push({ variable, closest, likelyTypo });
  }
  return found.sort((a, b) => (a.variable < b.variable ? -1 : 1));
}
