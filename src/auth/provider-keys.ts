// The identity provider's signing keys (a JWKS): fetched at start, refreshed in the background as its
// Cache-Control says, refreshed for a token whose key is missing (an unknown `kid`, a key replaced
// under its `kid`, or the only key for tokens without one) at most once per interval, and kept when
// the provider is down. Nothing here is on the check path but a map lookup.
import type { ProviderSettings } from "../config/identity-settings.js";
import type { Logger } from "../process/logger.js";
import { jwksUriOf, shownIssuer } from "./provider-discovery.js";
import { getJson, readOf, shownUrl } from "./provider-fetch.js";
import {
  type KeySet,
  MAX_KEYS,
  MAX_TRIED_WITHOUT_KID,
  type PastBounds,
  type ProviderKey,
  type RefusedKey,
  readJwks,
  sameKey,
} from "./provider-jwks.js";

export type KeyTimings = {
  /** Bounds of a refresh interval, whatever Cache-Control's max-age says. */
  minRefreshMs: number;
  maxRefreshMs: number;
  /** Without a max-age. */
  defaultRefreshMs: number;
  /**
   * At most one refresh per this for tokens whose key is missing (unknown `kid`s, signatures a
   * known kid's keys failed, or every key, for a token without a kid), all together: a flood of
   * made-up kids or forged signatures is not a flood to the provider.
   */
  missingKeyIntervalMs: number;
  /** One fetch's deadline (a slow provider). */
  fetchTimeoutMs: number;
  /** Retries after a failure: doubling from the first, up to the last. */
  retryMs: readonly [number, number];
};

export const KEY_TIMINGS: KeyTimings = {
  minRefreshMs: 60_000,
  // A key the provider withdraws (a leaked one) stays trusted until the next refresh: an hour at most.
  maxRefreshMs: 3_600_000,
  defaultRefreshMs: 600_000,
  missingKeyIntervalMs: 30_000,
  fetchTimeoutMs: 5_000,
  retryMs: [1_000, 60_000],
};

export type FetchOutcome =
  | { ok: true; keys: number; refreshInMs: number; refused: RefusedKey[]; past: PastBounds }
  | { ok: false; error: string; attempt: number };

/**
 * How a fetch changed the key set. `removed`: a kid known before is gone or names another key now,
 * or the same key for another alg (tokens it verified are suspect). `added`: a kid is new or names
 * another key now, or the same for another alg (a token that failed before may verify now).
 */
export type KeySetChange = { removed: boolean; added: boolean };

export type ProviderKeys = {
  /**
   * The keys a token's header may mean: those of its `kid`, or every key for a token without one
   * (RFC 7515 leaves the choice to the verifier; it tries the first MAX_TRIED_WITHOUT_KID that fit
   * the token's alg). Empty when none is known.
   */
  candidates(kid: string | undefined): readonly ProviderKey[];
  /** Whether a key set was loaded once. */
  loaded(): boolean;
  /** Resolves once the first key set is loaded (never, while the provider never answers). */
  ready(): Promise<void>;
  /**
   * A token's key is missing (its kid is unknown, or the keys it may mean failed its signature, as
   * when the provider replaced a key under the same kid, or its only key for tokens without one):
   * starts a refresh unless one ran for this within the interval; the refresh in flight (to wait
   * on), or undefined when none may run now.
   */
  refreshForMissingKey(): Promise<void> | undefined;
  /** Called after each fetch, with how it changed the key set (nothing, after a failed one). */
  onFetch(listener: (outcome: FetchOutcome, change: KeySetChange) => void): void;
  start(): void;
  stop(): void;
};

/** Whether a key of `from` is not in `to` under its kid, for the same alg. */
function missingFrom(from: KeySet, to: KeySet): boolean {
  return [...from].some(([kid, list]) => {
    const others = to.get(kid) ?? [];
    return list.some((entry) => !others.some((other) => sameKey(other, entry)));
  });
}

const sizeOf = (keys: KeySet): number => [...keys.values()].reduce((n, list) => n + list.length, 0);

export function createProviderKeys(
  settings: Pick<ProviderSettings, "source">,
  timings: KeyTimings = KEY_TIMINGS,
): ProviderKeys {
  let keys: KeySet = new Map();
  let all: readonly ProviderKey[] = [];
  let isLoaded = false;
  let jwksUrl = settings.source.kind === "jwks" ? settings.source.url : undefined;
  let inFlight: Promise<void> | undefined;
  let lastMissingKeyRefresh = Number.NEGATIVE_INFINITY;
  let failures = 0;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const listeners: ((outcome: FetchOutcome, change: KeySetChange) => void)[] = [];
  let markReady: () => void = () => {};
  const firstLoad = new Promise<void>((resolve) => {
    markReady = resolve;
  });

  const schedule = (ms: number) => {
    clearTimeout(timer);
    if (stopped) return;
    timer = setTimeout(() => {
      refresh().catch(() => undefined);
    }, ms);
    timer.unref();
  };

  const fetchOnce = async (): Promise<void> => {
    // Discovery again on every refresh: a provider that moves its keys is followed, and a document
    // answered once by someone else is not kept until the next restart.
    const { source } = settings;
    if (source.kind === "oidc") {
      const discovery = `${source.issuerUrl.replace(/\/+$/, "")}/.well-known/openid-configuration`;
      const { body } = await getJson(discovery, timings.fetchTimeoutMs);
      jwksUrl = readOf(discovery, () => jwksUriOf(body, source));
    }
    const url = jwksUrl as string;
    const { body, maxAge } = await getJson(url, timings.fetchTimeoutMs);
    const { keys: next, all: distinct, refused, past } = readOf(url, () => readJwks(body));
    if (next.size === 0) {
      const why = refused.map((r) => `kid ${JSON.stringify(r.kid)}: ${r.reason}`).join("; ");
      throw new Error(
        `${shownUrl(url)}: the JWKS holds no usable signature key${why === "" ? "" : ` (refused ${why})`}`,
      );
    }
    // A kid gone, or one whose key changed (a compromised key replaced under the same kid).
    const change = { removed: missingFrom(keys, next), added: missingFrom(next, keys) };
    keys = next;
    all = distinct;
    isLoaded = true;
    failures = 0;
    markReady();
    const wanted = maxAge ?? timings.defaultRefreshMs;
    const refreshInMs = Math.min(timings.maxRefreshMs, Math.max(timings.minRefreshMs, wanted));
    schedule(refreshInMs);
    // Told at once, with the keys swapped: no check runs between the two on what they replaced.
    for (const l of listeners) l({ ok: true, keys: sizeOf(next), refreshInMs, refused, past }, change);
  };

  const refresh = (): Promise<void> => {
    inFlight ??= fetchOnce()
      .then(
        () => undefined,
        (error: unknown) => {
          failures += 1;
          const [first, last] = timings.retryMs;
          schedule(Math.min(last, first * 2 ** Math.min(failures - 1, 20)));
          const outcome: FetchOutcome = { ok: false, error: (error as Error).message, attempt: failures };
          for (const l of listeners) l(outcome, { removed: false, added: false });
        },
      )
      .finally(() => {
        inFlight = undefined;
      });
    return inFlight;
  };

  return {
    candidates: (kid) => (kid === undefined ? all : (keys.get(kid) ?? [])),
    loaded: () => isLoaded,
    ready: () => firstLoad,
    refreshForMissingKey() {
      if (inFlight !== undefined) return inFlight;
      const now = Date.now();
      if (now - lastMissingKeyRefresh < timings.missingKeyIntervalMs) return undefined;
      lastMissingKeyRefresh = now;
      return refresh();
    },
    onFetch(listener) {
      listeners.push(listener);
    },
    start() {
      stopped = false;
      refresh().catch(() => undefined);
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/**
 * A warning at start when JWT_ISSUER is not the discovery document's issuer. That issuer is
 * OIDC_ISSUER whenever keys load (a document naming another is refused), so the settings tell it
 * at once, provider up or not, and no refresh can change it. Right only where the provider's tokens
 * name another issuer than its document (Entra ID's v1 access tokens say https://sts.windows.net/…).
 */
function warnIssuerMismatch(settings: Pick<ProviderSettings, "source" | "issuer">, logger: Logger): void {
  const { source, issuer } = settings;
  if (source.kind !== "oidc" || source.issuerUrl === issuer) return;
  const slash = source.issuerUrl.replace(/\/+$/, "") === issuer.replace(/\/+$/, "");
  logger.warn(
    {
      event: "provider_issuer_mismatch",
      jwtIssuer: issuer.slice(0, 200),
      oidcIssuer: shownIssuer(source.issuerUrl),
    },
    slash
      ? "JWT_ISSUER and OIDC_ISSUER differ in a trailing slash: provider tokens are refused unless their iss is JWT_ISSUER's form (the provider's is most likely OIDC_ISSUER's)"
      : "JWT_ISSUER is not the issuer of OIDC_ISSUER's discovery document: provider tokens are refused unless their iss is JWT_ISSUER",
  );
}

/**
 * A warning per fetch whose JWKS went past a bound: keys not read, or keys that tokens without a kid
 * of an allowed alg are not tried against. Rare (providers publish 2 to 10 keys), and each refresh
 * says it again, as the provider may have trimmed its JWKS since.
 */
function warnPastBounds(past: PastBounds, algorithms: readonly string[], logger: Logger): void {
  const untried = past.untried.filter(({ alg }) => algorithms.includes(alg));
  if (past.notRead === 0 && untried.length === 0) return;
  logger.warn(
    {
      event: "provider_keys_past_bounds",
      notRead: past.notRead,
      untriedWithoutKid: Object.fromEntries(untried.map(({ alg, keys }) => [alg, keys])),
    },
    `the JWKS holds more keys than tollgate uses: its entries after the first ${MAX_KEYS} keys kept are not read, and a token without a kid is tried against the first ${MAX_TRIED_WITHOUT_KID} keys that fit its alg only`,
  );
}

/** A log line per fetch of the key set: loaded, or failed (and what that leaves in use); the issuers' mismatch at once. */
export function logKeyFetches(
  keys: ProviderKeys,
  logger: Logger,
  settings: Pick<ProviderSettings, "source" | "issuer" | "algorithms">,
): void {
  warnIssuerMismatch(settings, logger);
  // The keys refused by the last fetch that loaded: told again only when they change, not each refresh.
  let refusedBefore = "[]";
  keys.onFetch((outcome) => {
    if (outcome.ok) {
      const refused = JSON.stringify(outcome.refused);
      if (refused !== refusedBefore) {
        for (const { kid, reason } of outcome.refused) {
          logger.warn(
            { event: "provider_key_refused", kid, reason },
            "identity provider key refused: it verifies no token",
          );
        }
        refusedBefore = refused;
      }
      warnPastBounds(outcome.past, settings.algorithms, logger);
      logger.info(
        {
          event: "provider_keys",
          keys: outcome.keys,
          refreshInSeconds: Math.round(outcome.refreshInMs / 1000),
        },
        "identity provider keys loaded",
      );
    } else {
      // Retried with a doubling delay (at most a minute), so this line comes no oftener.
      logger.error(
        { event: "provider_keys_failed", attempt: outcome.attempt, err: outcome.error },
        keys.loaded()
          ? "identity provider keys not refreshed: the last ones stay in use"
          : "identity provider keys not loaded: provider tokens are refused and /ready waits",
      );
    }
  });
}
