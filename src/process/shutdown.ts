// SIGTERM and SIGINT: /ready turns 503, after DRAIN_DELAY_MS every listener stops accepting and
// finishes what is in flight, the store closes, the last spans are exported, and the process exits 0.
import type { Listener } from "../frontends/listener.js";
import type { Store } from "../store/store.js";
import type { Tracing } from "../tracing/tracing.js";
import type { Logger } from "./logger.js";
import type { Readiness } from "./readiness.js";

/** After the drain delay, how long requests in flight may take before the process exits anyway. */
const FORCED_EXIT_MS = 10_000;
/**
 * A signal this soon after the first is the same stop delivered twice (to the whole process group,
 * and once more by a parent that forwards it: npm, the WORKERS supervisor), not a person insisting.
 */
const SAME_STOP_MS = 1_000;

export function stopOnSignals(options: {
  listeners: readonly Listener[];
  store: Store;
  logger: Logger;
  readiness: Readiness;
  drainDelayMs: number;
  /** Its last spans are exported before the exit (a bounded wait). */
  tracing?: Tracing | undefined;
}): void {
  const { listeners, store, logger, readiness } = options;
  let drain: NodeJS.Timeout | undefined;
  let closing = false;
  const close = (): void => {
    if (closing) return;
    closing = true;
    clearTimeout(drain);
    // Every listener stops accepting at once, before any is waited for.
    for (const listener of listeners) listener.drain();
    void Promise.all(listeners.map((listener) => listener.stop()))
      .then(() => store.close())
      .catch(() => undefined)
      .then(() => options.tracing?.shutdown())
      .then(() => {
        logger.info({ event: "stopped" }, "stopped");
        process.exit(0);
      });
  };
  let stoppingSince = 0;
  const stop = (signal: NodeJS.Signals): void => {
    if (readiness.phase() === "stopping") {
      // A second signal cuts the drain delay short, unless it is the first one delivered again.
      if (Date.now() - stoppingSince >= SAME_STOP_MS) close();
      return;
    }
    stoppingSince = Date.now();
    readiness.markStopping();
    // SIGTERM comes from an orchestrator with a load balancer to warn; SIGINT from a person at a terminal.
    const delay = signal === "SIGTERM" ? options.drainDelayMs : 0;
    logger.info(
      { event: "stopping", signal, drainDelayMs: delay },
      delay > 0 ? `/ready answers 503; the listeners close in ${delay} ms` : "closing the listeners",
    );
    // Not unref'd: whatever else holds the process, this ends it.
    setTimeout(() => {
      logger.warn(
        { event: "stop_forced" },
        `requests still open ${FORCED_EXIT_MS / 1000} s after closing; exiting`,
      );
      process.exit(0);
    }, delay + FORCED_EXIT_MS);
    drain = setTimeout(close, delay);
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
}
