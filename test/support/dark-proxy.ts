// A loopback TCP proxy whose open connections can go dark (kept open, nothing passes either way) or slow.
import { type AddressInfo, createConnection, createServer, type Socket } from "node:net";

export type DarkProxy = {
  url: string;
  /** Connections accepted so far. */
  accepted(): number;
  /**
   * Every connection open now stops carrying bytes in both directions, without a close or a reset
   * (a dropped route, a frozen host); connections made afterwards pass as usual.
   */
  darken(): void;
  /** As darken, for the `n`-th connection accepted alone (1 for the first), if still open. */
  darkenOne(n: number): void;
  /** Every connection open now is closed at once, as Redis closes a killed client's; new ones pass. */
  cut(): void;
  /**
   * Every connection open now stops carrying Redis's replies back, while its commands still reach
   * Redis (a path that fails one way): Redis runs what it is sent, the client hears nothing.
   */
  darkenReplies(): void;
  /**
   * Every reply (on every connection, open now or later) reaches the client between `minMs` and
   * `maxMs` late, in order, until `slowReplies(0, 0)`: a Redis whose latency wanders.
   */
  slowReplies(minMs: number, maxMs: number): void;
  close(): Promise<void>;
};

export async function startDarkProxy(target: { host: string; port: number }): Promise<DarkProxy> {
  const open = new Set<{
    client: Socket;
    upstream: Socket;
    n: number;
    dark: boolean;
    repliesDark: boolean;
  }>();
  let accepted = 0;
  const delay = { minMs: 0, maxMs: 0 };
  const server = createServer((client) => {
    accepted += 1;
    const upstream = createConnection(target);
    const pair = { client, upstream, n: accepted, dark: false, repliesDark: false };
    open.add(pair);
    client.on("data", (chunk) => {
      if (!pair.dark) upstream.write(chunk);
    });
    // Delayed replies wait in one queue, each due no sooner than the one before it: written in
    // order by one timer (a timer each could fire out of order when two are due at once).
    const delayed: { chunk: Buffer; dueAt: number }[] = [];
    let timer: NodeJS.Timeout | undefined;
    const drain = (): void => {
      timer = undefined;
      while (delayed.length > 0 && (delayed[0]?.dueAt as number) <= Date.now())
        client.write(delayed.shift()?.chunk as Buffer);
      if (delayed.length > 0) timer = setTimeout(drain, (delayed[0]?.dueAt as number) - Date.now());
    };
    upstream.on("data", (chunk: Buffer) => {
      if (pair.dark || pair.repliesDark) return;
      if (delay.maxMs === 0 && delayed.length === 0) {
        client.write(chunk);
        return;
      }
      const after = delayed.at(-1)?.dueAt ?? 0;
      const dueAt = Date.now() + delay.minMs + Math.random() * (delay.maxMs - delay.minMs);
      delayed.push({ chunk, dueAt: Math.max(after, dueAt) });
      timer ??= setTimeout(drain, (delayed[0]?.dueAt as number) - Date.now());
    });
    const end = () => {
      clearTimeout(timer);
      open.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("close", end);
    upstream.on("close", end);
    client.on("error", end);
    upstream.on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `redis://127.0.0.1:${port}`,
    accepted: () => accepted,
    darken() {
      for (const pair of open) pair.dark = true;
    },
    darkenOne(n) {
      for (const pair of open) if (pair.n === n) pair.dark = true;
    },
    cut() {
      for (const pair of open) {
        pair.client.destroy();
        pair.upstream.destroy();
      }
    },
    darkenReplies() {
      for (const pair of open) pair.repliesDark = true;
    },
    slowReplies(minMs, maxMs) {
      delay.minMs = minMs;
      delay.maxMs = maxMs;
    },
    async close() {
      for (const pair of open) {
        pair.client.destroy();
        pair.upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
