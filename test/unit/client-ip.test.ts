// Client addresses: trusted hops, IPv6 subnets, mapped addresses and junk.
import { describe, expect, it } from "vitest";
import { clientAddress, clientIp, normalizeIp } from "../../src/frontends/client-ip.js";

const one = { trustedProxyHops: 1, ipv6Subnet: 64 };

describe("client address", () => {
  it("takes the entry that the trusted proxy appended, whatever the client put before it", () => {
    expect(clientIp("6.6.6.6, 203.0.113.9", "10.0.0.2", one)).toBe("203.0.113.9");
    expect(clientIp("203.0.113.9", "10.0.0.2", one)).toBe("203.0.113.9");
    expect(
      clientIp("1.1.1.1, 6.6.6.6, 203.0.113.9, 10.0.0.7", "10.0.0.2", { ...one, trustedProxyHops: 2 }),
    ).toBe("203.0.113.9");
  });

  it("uses the peer when no hop is trusted, no header came, or the entry is junk", () => {
    expect(clientIp("203.0.113.9", "10.0.0.2", { ...one, trustedProxyHops: 0 })).toBe("10.0.0.2");
    expect(clientIp(undefined, "::ffff:10.0.0.2", one)).toBe("10.0.0.2");
    expect(clientIp("not-an-ip", "10.0.0.2", one)).toBe("10.0.0.2");
    expect(clientIp("{u:alice}", "10.0.0.2", one)).toBe("10.0.0.2");
  });

  it("puts IPv6 clients of one /64 under one subject", () => {
    const a = normalizeIp("2001:db8:1:2:aaaa::1", 64);
    const b = normalizeIp("2001:0db8:0001:0002:ffff:ffff:ffff:ffff", 64);
    expect(a).toBe("2001:db8:1:2:0:0:0:0/64");
    expect(b).toBe(a);
    expect(normalizeIp("2001:db8:1:3::1", 64)).not.toBe(a);
    expect(normalizeIp("::1", 128)).toBe("0:0:0:0:0:0:0:1/128");
    expect(normalizeIp("[2001:db8::1]:443", 48)).toBe("2001:db8:0:0:0:0:0:0/48");
    expect(normalizeIp("fe80::1%eth0", 64)).toBe("fe80:0:0:0:0:0:0:0/64");
    expect(normalizeIp("::ffff:192.0.2.1", 64)).toBe("192.0.2.1");
    expect(normalizeIp("2001:db8::192.0.2.1", 128)).toBe("2001:db8:0:0:0:0:c000:201/128");
    // NAT64's well-known prefix carries an IPv4 client, as a mapped address does; other /96s do not.
    expect(normalizeIp("64:ff9b::192.0.2.1", 64)).toBe("192.0.2.1");
    expect(normalizeIp("64:FF9B:0:0:0:0:c000:201", 128)).toBe("192.0.2.1");
    expect(normalizeIp("64:ff9b:1::192.0.2.1", 64)).toBe("64:ff9b:1:0:0:0:0:0/64");
    expect(normalizeIp("::192.0.2.1", 64)).toBe("0:0:0:0:0:0:0:0/64");
  });

  it("accepts an IPv4 address with a port and refuses anything else", () => {
    expect(normalizeIp("192.0.2.1:8080", 64)).toBe("192.0.2.1");
    for (const junk of ["", "1.2.3", "1.2.3.4.5", "999.1.1.1", "hello", "1.2.3.4\r\nX: y", "::g"]) {
      expect(normalizeIp(junk, 64), junk).toBeUndefined();
    }
  });

  it("takes an address the proxy states itself over X-Forwarded-For, keyed by the same IPv6 subnet", () => {
    const from = { forwardedFor: "6.6.6.6, 203.0.113.9", peer: "10.0.0.2" };
    expect(clientAddress({ ...from, stated: "198.51.100.4" }, one)).toBe("198.51.100.4");
    expect(clientAddress({ ...from, stated: "2001:db8:1:2:aaaa::1" }, one)).toBe("2001:db8:1:2:0:0:0:0/64");
    expect(clientAddress({ ...from, stated: "::ffff:198.51.100.4" }, one)).toBe("198.51.100.4");
    // Not an address, or none stated: X-Forwarded-For per the trusted hops, as without it.
    expect(clientAddress({ ...from, stated: "junk" }, one)).toBe("203.0.113.9");
    expect(clientAddress(from, one)).toBe("203.0.113.9");
    expect(clientAddress({ ...from, stated: undefined }, { ...one, trustedProxyHops: 0 })).toBe("10.0.0.2");
  });
});
