// Token buckets a connection spends on what costs the server without advancing any call: client
// resets and refused streams (CVE-2023-44487, "rapid reset"), and frames that carry no work (PING,
// SETTINGS, PRIORITY, empty DATA, unknown types). Refilled from the server's one-second clock, so
// that spending costs no clock read.

export type Clock = { seconds: number };

export class Budget {
  private tokens: number;
  private at: number;

  constructor(
    private readonly clock: Clock,
    private readonly burst: number,
    private readonly perSecond: number,
  ) {
    this.tokens = burst;
    this.at = clock.seconds;
  }

  /** Spends one token; false when none is left. */
  spend(): boolean {
    const now = this.clock.seconds;
    if (now !== this.at) {
      this.tokens = Math.min(this.burst, this.tokens + (now - this.at) * this.perSecond);
      this.at = now;
    }
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** Gives one token back (up to the burst). */
  refund(): void {
    if (this.tokens < this.burst) this.tokens += 1;
  }
}
