// Where the process is in its life: starting (users not loaded yet), ready, or draining for a stop.
export type Phase = "starting" | "ready" | "stopping";

export type Readiness = {
  phase(): Phase;
  /** Every listener accepts and the users are loaded. */
  markReady(): void;
  /** SIGTERM arrived: /ready answers 503 so that load balancers stop sending. */
  markStopping(): void;
  /** Calls `listener` on every change of phase (gRPC health's Watch); returns the unsubscribe. */
  onChange(listener: (phase: Phase) => void): () => void;
};

export function createReadiness(initial: Phase = "starting"): Readiness {
  let phase = initial;
  const listeners = new Set<(phase: Phase) => void>();
  const become = (next: Phase) => {
    if (phase === next) return;
    phase = next;
    for (const listener of [...listeners]) listener(next);
  };
  return {
    phase: () => phase,
    markReady() {
      if (phase === "starting") become("ready");
    },
    markStopping() {
      become("stopping");
    },
    onChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}
