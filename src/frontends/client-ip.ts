// The client's address, normalized into a subject key (IPV6_SUBNET): the one way every front end
// (and the public API) learns it, from what its proxy states or X-Forwarded-For per TRUSTED_PROXY_HOPS.
import { isIP } from "node:net";

export type ClientIpOptions = { trustedProxyHops: number; ipv6Subnet: number };

/**
 * Envoy's statement of the client's address, which envoy.yaml sets from the downstream address:
 * Envoy's ext_authz client appends its own address to X-Forwarded-For. Clients cannot reach the
 * check with this header (it is not in allowed_headers).
 */
export const CLIENT_IP_HEADER = "x-tollgate-client-ip";

function expandIpv6(address: string): number[] | undefined {
  let text = address;
  let tail: number[] = [];
  const lastColon = text.lastIndexOf(":");
  if (text.includes(".", lastColon)) {
    // An embedded IPv4 address ends the text: its four bytes are the last two groups.
    const parts = text
      .slice(lastColon + 1)
      .split(".")
      .map(Number);
    tail = [((parts[0] ?? 0) << 8) | (parts[1] ?? 0), ((parts[2] ?? 0) << 8) | (parts[3] ?? 0)];
    text = text.slice(0, lastColon + 1);
    if (!text.endsWith("::")) text = text.slice(0, -1);
  }
  const [head = "", rest] = text.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = rest === undefined || rest === "" ? [] : rest.split(":");
  const missing = 8 - tail.length - left.length - right.length;
  if (missing < 0 || (rest === undefined && missing !== 0)) return undefined;
  return [...left, ...Array(missing).fill("0"), ...right].map((g) => Number.parseInt(g, 16)).concat(tail);
}

/**
 * Whether IPv6 `groups` carry an IPv4 client in their last 32 bits: IPv4-mapped (::ffff:0:0/96, a
 * dual-stack socket's IPv4 peer) or NAT64's well-known prefix (64:ff9b::/96, RFC 6052), which a
 * translator in front of an IPv6-only proxy gives every IPv4 client: keyed by its /64, they would
 * all be one client.
 */
function embedsIpv4(groups: readonly number[]): boolean {
  const [a, b, c, d, e, f] = groups;
  if (c !== 0 || d !== 0 || e !== 0) return false;
  return (a === 0 && b === 0 && f === 0xffff) || (a === 0x64 && b === 0xff9b && f === 0);
}

/**
 * Canonical form of an address; IPv6 reduced to its /subnet prefix, an IPv6 form of an IPv4 client
 * (mapped, or NAT64's) to the IPv4 address.
 */
export function normalizeIp(raw: string, ipv6Subnet: number): string | undefined {
  let address = raw.trim();
  if (address.startsWith("["))
    address = address.slice(1, address.indexOf("]") === -1 ? undefined : address.indexOf("]"));
  const kind = isIP(address);
  if (kind === 4) return address;
  if (kind !== 6) {
    // "1.2.3.4:5678": an IPv4 address with a port.
    const colon = address.lastIndexOf(":");
    return colon > 0 && isIP(address.slice(0, colon)) === 4 ? address.slice(0, colon) : undefined;
  }
  const zone = address.indexOf("%");
  if (zone !== -1) address = address.slice(0, zone);
  const groups = expandIpv6(address.toLowerCase());
  if (groups === undefined || groups.length !== 8) return undefined;
  if (embedsIpv4(groups)) {
    const [a = 0, b = 0] = groups.slice(6);
    return `${a >> 8}.${a & 255}.${b >> 8}.${b & 255}`;
  }
  let bits = ipv6Subnet;
  const masked = groups.map((g) => {
    const keep = Math.max(0, Math.min(16, bits));
    bits -= 16;
    return keep === 0 ? 0 : g & (0xffff << (16 - keep)) & 0xffff;
  });
  return `${masked.map((g) => g.toString(16)).join(":")}/${ipv6Subnet}`;
}

/**
 * The address `trustedProxyHops` entries from the right of X-Forwarded-For (each trusted proxy
 * appended one), or the peer address when no hop is trusted or the entry is not an address.
 */
export function clientIp(
  forwardedFor: string | undefined,
  peer: string | undefined,
  options: ClientIpOptions,
): string {
  const fallback = normalizeIp(peer ?? "", options.ipv6Subnet) ?? "unknown";
  if (options.trustedProxyHops === 0 || forwardedFor === undefined || forwardedFor === "") return fallback;
  const entries = forwardedFor.split(",");
  const entry = entries[Math.max(0, entries.length - options.trustedProxyHops)] ?? "";
  return normalizeIp(entry, options.ipv6Subnet) ?? fallback;
}

/**
 * The client's subject address as a front end learns it. `stated`: an address the proxy states
 * itself (Envoy's X-Tollgate-Client-Ip; a gRPC check's source peer), used when it is an address.
 * Otherwise X-Forwarded-For per TRUSTED_PROXY_HOPS, else the peer address.
 */
export function clientAddress(
  from: { stated?: string | undefined; forwardedFor: string | undefined; peer: string | undefined },
  options: ClientIpOptions,
): string {
  const stated = from.stated === undefined ? undefined : normalizeIp(from.stated, options.ipv6Subnet);
  return stated ?? clientIp(from.forwardedFor, from.peer, options);
}
