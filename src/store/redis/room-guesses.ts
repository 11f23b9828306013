// Which windows' last answer here left room. The next check of such a window asks the script to count
// before it reads the window's length (lib/common.lua's log_push): one Redis command less for the usual
// allowed sliding-log check, and, when the window filled meanwhile (another session, another tollgate),
// a request taken back in the same atomic call. Only a guess of which way is cheaper: the answer is
// exact either way. Bounded, dropped whole when full (about 10 MB at the bound).
import type { HitResult } from "../../ratelimit/types.js";

const MAX_GUESSES = 100_000;

export type RoomGuesses = {
  expects(window: string): boolean;
  /** Learns from a counted check's answer. */
  learn(window: string, hit: HitResult): void;
};

export function createRoomGuesses(): RoomGuesses {
  const roomy = new Set<string>();
  return {
    expects: (window) => roomy.has(window),
    learn(window, hit) {
      if (hit.allowed && hit.remaining > 0) {
        if (roomy.size >= MAX_GUESSES) roomy.clear();
        roomy.add(window);
      } else roomy.delete(window);
    },
  };
}
