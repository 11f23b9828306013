// Bind addresses (HOST, CHECK_HOST, ADMIN_HOST): what may be given, and which of them only this machine reaches.
import { BlockList, isIP } from "node:net";

const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const HOST_NAME = new RegExp(`^(?=.{1,253}$)${LABEL}(?:\\.${LABEL})*$`);

/** Why `value` cannot be a bind address, or undefined when it can (an IP address or a host name). */
export function hostProblem(value: string): string | undefined {
  if (isIP(value) !== 0) return undefined;
  // A name's last label is never all digits: "10.0.0.256" is a mistyped address, not a name.
  if (HOST_NAME.test(value) && !/(^|\.)\d+$/.test(value)) return undefined;
  const bracketed = /^\[(.*)\]$/.exec(value)?.[1];
  if (bracketed !== undefined && isIP(bracketed) === 6) {
    return `write an IPv6 address without brackets (${bracketed}), got "${value}"`;
  }
  return `expected an IP address (0.0.0.0, ::, 127.0.0.1, …) or a host name, without a port, got "${value}"`;
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet("127.0.0.0", 8, "ipv4");
LOOPBACK.addAddress("::1", "ipv6");

/** Whether only this machine can reach a listener bound to `host` (a wildcard or another name: no). */
export function isLoopbackHost(host: string): boolean {
  const name = host.toLowerCase();
  if (name === "localhost" || name.endsWith(".localhost")) return true;
  const family = isIP(name);
  // IPv4-mapped IPv6 addresses (::ffff:127.0.0.1) are matched against the IPv4 subnet.
  return family !== 0 && LOOPBACK.check(name, family === 6 ? "ipv6" : "ipv4");
}

/**
 * The start-up warning when production serves /metrics without a token on an admin address that
 * other machines reach, or undefined. (Outside production the admin listener is on loopback by
 * default, and a developer's metrics are no secret.)
 */
export function metricsExposureWarning(config: {
  production: boolean;
  metricsToken: string | undefined;
  adminHost: string;
}): string | undefined {
  if (!config.production || config.metricsToken !== undefined || isLoopbackHost(config.adminHost)) {
    return undefined;
  }
  return `/metrics answers anyone who reaches ${config.adminHost} (the admin listener's address, not loopback) without a token: set METRICS_TOKEN, or set ADMIN_HOST to a loopback address`;
}
