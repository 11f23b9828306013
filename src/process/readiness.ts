// Where the process is in its life: starting (users not loaded yet), ready, or draining for a stop.
export type Phase = "starting" | "ready" | "stopping";

export type Readiness = {
  phase(): Phase;
  /** Every listener accepts and the users are loaded. */
  markReady(): void;
  /** SIGTERM arrived: /ready answers 503 so that load balancers stop sending. */
  markStopping(): void;
};

export function createReadiness(initial: Phase = "starting"): Readiness {
  let phase = initial;
  return {
    phase: () => phase,
    markReady() {
      if (phase === "starting") phase = "ready";
    },
    markStopping() {
      phase = "stopping";
    },
  };
}
