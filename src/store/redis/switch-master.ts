// Follows the Sentinels' +switch-master announcements: a connection to a master that is no longer the
// one named is made anew at once; a connection already on the named master is kept.
import type { Redis } from "ioredis";
import type { HostPort } from "../../config/redis-settings.js";

const CHANNEL = "+switch-master";
/** As many Sentinels as ioredis's own failover detector would follow. */
const MAX_SENTINELS = 10;

/**
 * Whether `client` is connected to `host`:`port`. A Sentinel names masters by the address it knows
 * them by, an IP unless hostnames are announced; a name that is not the socket's peer address reads
 * as "elsewhere", which reconnects as ioredis's own detector always did.
 */
function connectedTo(client: Redis, host: string, port: number): boolean {
  const stream = client.status === "ready" ? client.stream : undefined;
  const peer = stream?.remoteAddress?.replace(/^::ffff:/, "");
  return stream?.remotePort === port && peer === host;
}

/**
 * The `ip:port` of each Sentinel in a SENTINEL SENTINELS reply, those it is not connected to right
 * now included: it is asked once per connection, and a Sentinel it has just learned of is listed
 * as disconnected until its link is up. A subscriber to one that stays down keeps retrying.
 */
function sentinelsIn(reply: unknown): HostPort[] {
  if (!Array.isArray(reply)) return [];
  return reply.flatMap((fields: unknown) => {
    if (!Array.isArray(fields)) return [];
    const field = (name: string): string | undefined => {
      const i = fields.indexOf(name);
      return i >= 0 && i % 2 === 0 ? String(fields[i + 1]) : undefined;
    };
    const [ip, port] = [field("ip"), Number(field("port"))];
    return ip === undefined || !Number.isInteger(port) ? [] : [{ host: ip, port }];
  });
}

/**
 * Subscribes to +switch-master on each of `sentinels` and on the Sentinels they know of. ioredis's
 * own detector reconnects on any announcement, whatever master it names and wherever the client
 * is: every Sentinel announces each failover as it learns of it, so a client that had already
 * reached the new master was cut off again by each late announcement, and every check degraded
 * meanwhile. `connectTo` makes a subscriber connection to one Sentinel.
 */
export function followSwitchMaster(
  client: Redis,
  options: { sentinels: readonly HostPort[]; name: string; connectTo(sentinel: HostPort): Redis },
): { close(): void } {
  const { name } = options;
  const followed = new Map<string, Redis>();
  let closed = false;

  const onAnnouncement = (message: string): void => {
    // "<master name> <old ip> <old port> <new ip> <new port>"
    const [master, , , host, port] = message.split(" ");
    if (closed || master !== name || host === undefined) return;
    if (!connectedTo(client, host, Number(port))) client.disconnect(true);
  };

  const follow = (sentinel: HostPort): void => {
    const key = `${sentinel.host}:${sentinel.port}`;
    if (closed || followed.has(key) || followed.size >= MAX_SENTINELS) return;
    const connection = options.connectTo(sentinel);
    followed.set(key, connection);
    connection.on("error", () => undefined);
    connection.on("message", (channel: string, message: string) => {
      if (channel === CHANNEL) onAnnouncement(message);
    });
    // Subscribed again on every connection (commands wait for none while it is down).
    connection.on("ready", () => {
      void connection
        .call("SENTINEL", "SENTINELS", name)
        .then((reply) => {
          for (const other of sentinelsIn(reply)) follow(other);
        })
        .catch(() => undefined)
        .finally(() => {
          connection.subscribe(CHANNEL).catch(() => undefined);
        });
    });
  };

  for (const sentinel of options.sentinels) follow(sentinel);
  return {
    close() {
      closed = true;
      for (const connection of followed.values()) connection.disconnect();
      followed.clear();
    },
  };
}
