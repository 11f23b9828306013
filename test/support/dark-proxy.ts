// A loopback TCP proxy whose open connections can go dark: kept open, nothing passes either way.
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
  /**
   * Every connection open now stops carrying Redis's replies back, while its commands still reach
   * Redis (a path that fails one way): Redis runs what it is sent, the client hears nothing.
   */
  darkenReplies(): void;
  close(): Promise<void>;
};

export async function startDarkProxy(target: { host: string; port: number }): Promise<DarkProxy> {
  const open = new Set<{ client: Socket; upstream: Socket; dark: boolean; repliesDark: boolean }>();
  let accepted = 0;
  const server = createServer((client) => {
    accepted += 1;
    const upstream = createConnection(target);
    const pair = { client, upstream, dark: false, repliesDark: false };
    open.add(pair);
    client.on("data", (chunk) => {
      if (!pair.dark) upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (!pair.dark && !pair.repliesDark) client.write(chunk);
    });
    const end = () => {
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
    darkenReplies() {
      for (const pair of open) pair.repliesDark = true;
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
