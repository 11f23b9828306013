// The check listener's own HTTP/1.1 parser: what it reads as node:http reads it, and what it refuses
// that two parsers could read two ways.
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { answerBytes } from "../../src/frontends/http1/answer.js";
import { BodyError, chunkedBody, lengthBody } from "../../src/frontends/http1/body.js";
import { type Head, parseHead } from "../../src/frontends/http1/head.js";

const head = (text: string) => parseHead(text) as Head;
const refused = (text: string) => (parseHead(text) as { status?: number }).status;

describe("a request head", () => {
  it("reads the request line and headers as node:http does: names lower-cased, repeats merged or dropped", () => {
    const parsed = head(
      [
        "GET /ext_authz/api/products?q=1 HTTP/1.1",
        "Host: x",
        "Authorization:   Bearer a  ",
        "authorization: Bearer b",
        "X-Forwarded-For: 1.2.3.4",
        "x-forwarded-for: 5.6.7.8",
        "Cookie: a=1",
        "Cookie: b=2",
        "Set-Cookie: s=1",
        "Set-Cookie: s=2",
        "X-Empty:",
      ].join("\r\n"),
    );
    expect(parsed.method).toBe("GET");
    expect(parsed.url).toBe("/ext_authz/api/products?q=1");
    expect({ ...parsed.headers }).toEqual({
      host: "x",
      authorization: "Bearer a",
      "x-forwarded-for": "1.2.3.4, 5.6.7.8",
      cookie: "a=1; b=2",
      "set-cookie": ["s=1", "s=2"],
      "x-empty": "",
    });
    expect([parsed.keepAlive, parsed.body, parsed.expectsContinue]).toEqual([true, 0, false]);
    // No prototype: a header named __proto__ is a header like any other.
    expect(Object.entries(head("GET / HTTP/1.1\r\nHost: x\r\n__proto__: y").headers)).toContainEqual([
      "__proto__",
      "y",
    ]);
  });

  it("keeps the connection as HTTP/1.1 and 1.0 say, and takes the body's framing", () => {
    expect(head("GET / HTTP/1.1\r\nHost: x\r\nConnection: close").keepAlive).toBe(false);
    expect(head("GET / HTTP/1.1\r\nHost: x\r\nConnection: TE, Close").keepAlive).toBe(false);
    expect(head("GET / HTTP/1.0").keepAlive).toBe(false);
    expect(head("GET / HTTP/1.0\r\nConnection: Keep-Alive").keepAlive).toBe(true);
    expect(head("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12").body).toBe(12);
    expect(head("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked").body).toBe("chunked");
    expect(
      head("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1").expectsContinue,
    ).toBe(true);
  });

  it("refuses with 400 whatever two parsers could read two ways", () => {
    const cases = {
      "bare LF in a value": "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\nContent-Length: 5",
      "bare CR in a value": "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb",
      "NUL in a value": "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\u0000b",
      "bare LF in the request line": "GET /a\nX HTTP/1.1\r\nHost: x",
      "obs-fold": "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b",
      "space before the colon": "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 5",
      "no colon": "GET / HTTP/1.1\r\nHost: x\r\nno-colon",
      "two lengths, even equal": "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5",
      "a length list": "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5",
      "a signed length": "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5",
      "a length beside chunked":
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked",
      "a coding before chunked": "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked",
      "chunked twice":
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
      "chunked in 1.0": "POST / HTTP/1.0\r\nTransfer-Encoding: chunked",
      "no Host in 1.1": "GET / HTTP/1.1",
      "two Hosts": "GET / HTTP/1.1\r\nHost: x\r\nHost: y",
      "an unknown version": "GET / HTTP/9.9\r\nHost: x",
      "HTTP/2's preface": "PRI * HTTP/2.0",
      "an unknown method": "FOO / HTTP/1.1\r\nHost: x",
      "a lower-case method": "get / HTTP/1.1\r\nHost: x",
      "two spaces": "GET  / HTTP/1.1\r\nHost: x",
      "a space in the target": "GET /a b HTTP/1.1\r\nHost: x",
      "a byte past ASCII in the target": "GET /caf\u00e9 HTTP/1.1\r\nHost: x",
      CONNECT: "CONNECT x:443 HTTP/1.1\r\nHost: x",
    };
    for (const [what, text] of Object.entries(cases)) expect([what, refused(text)]).toEqual([what, 400]);
    expect(refused("GET / HTTP/1.1\r\nHost: x\r\nExpect: nothing")).toBe(417);
  });

  it("reads the framing of lines past the 2000 headers it keeps", () => {
    const many = Array.from({ length: 2001 }, (_, i) => `X-${i}: v`).join("\r\n");
    const parsed = head(`POST / HTTP/1.1\r\nHost: x\r\n${many}\r\nContent-Length: 7`);
    expect(parsed.body).toBe(7);
    expect(parsed.headers["content-length"]).toBeUndefined();
  });

  it("does not keep long header names made up by a client (its cache of names holds short ones)", () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    gc();
    const before = process.memoryUsage().heapUsed;
    // 1000 heads near the 64 KiB bound, each with a name of its own: kept, they held 57 MiB.
    for (let i = 0; i < 1000; i += 1) head(`GET / HTTP/1.1\r\nHost: x\r\nx${i}-${"n".repeat(60_000)}: v`);
    gc();
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(16 * 1024 * 1024);
  });
});

/** Feeds `parts` one after another; the data kept and where the body ended in the last part. */
function feed(reader: ReturnType<typeof chunkedBody>, parts: string[]): { data: string; end: number } {
  let data = "";
  let end = 0;
  for (const part of parts) {
    end = reader.feed(Buffer.from(part, "latin1"), 0, (chunk) => {
      data += chunk.toString("latin1");
    });
  }
  return { data, end };
}

describe("a request body", () => {
  it("takes a length's bytes and no more", () => {
    const reader = lengthBody(5);
    expect(feed(reader, ["abc", "deGET"])).toEqual({ data: "abcde", end: 2 });
    expect(reader.done).toBe(true);
  });

  it("reads chunks split anywhere, with extensions and trailers, and stops at the body's end", () => {
    const text =
      "4;name=value\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: t\r\n\r\nGET /next";
    for (let cut = 1; cut < text.length; cut += 1) {
      const reader = chunkedBody();
      const { data, end } = feed(reader, [text.slice(0, cut), text.slice(cut)]);
      expect(reader.done, `cut at ${cut}`).toBe(true);
      expect(data).toBe("Wikipedia in\r\n\r\nchunks.");
      expect(text.slice(cut).slice(end)).toBe("GET /next".slice(Math.max(0, cut - (text.length - 9))));
    }
  });

  it("refuses a chunk framing that two parsers could read two ways", () => {
    const bad = [
      "5\nhello\r\n0\r\n\r\n", // bare LF after the size
      "5\r\nhello\n0\r\n\r\n", // bare LF after the data
      "5\r\nhelloX\r\n0\r\n\r\n", // data longer than its size
      "-5\r\nhello\r\n",
      "0x5\r\nhello\r\n",
      " 5\r\nhello\r\n",
      "5 \r\nhello\r\n",
      "123456789\r\n", // past 8 hex digits
      "0\r\nno-colon\r\n\r\n",
      "0\r\nX: a\rb\r\n\r\n",
    ];
    for (const text of bad) {
      expect(() => feed(chunkedBody(), [text]), JSON.stringify(text)).toThrow(BodyError);
    }
    expect(() => feed(chunkedBody(), [`1;${"x".repeat(5000)}`])).toThrow(BodyError);
  });
});

describe("an answer", () => {
  it("is one string with its length, Date and the connection's fate; no body for HEAD", () => {
    const answer = { status: 429, headers: { "retry-after": "3" }, body: '{"a":1}' };
    const text = answerBytes(answer, "keep", true) as string;
    expect(text).toMatch(
      /^HTTP\/1\.1 429 Too Many Requests\r\nretry-after: 3\r\ncontent-length: 7\r\ndate: .+ GMT\r\nkeep-alive: timeout=75\r\n\r\n\{"a":1\}$/,
    );
    expect(answerBytes(answer, "close", false)).toMatch(/connection: close\r\n\r\n$/);
    expect(answerBytes(answer, "keep-1.0", true)).toMatch(/connection: keep-alive\r\n/);
    expect(answerBytes({ status: 204, headers: {}, body: "" }, "keep", true)).not.toMatch(/content-length/);
    const utf8 = answerBytes({ status: 200, headers: {}, body: "é" }, "keep", true);
    expect(Buffer.isBuffer(utf8) && utf8.toString("utf8").endsWith("\r\n\r\né")).toBe(true);
  });

  it("is never written with a header that would inject another", () => {
    const bad: Record<string, string>[] = [
      { "x-a": "1\r\nset-cookie: x" },
      { "x-a": "1\n" },
      { "x a": "1" },
      { "x\r\ny": "1" },
    ];
    for (const headers of bad) {
      expect(() => answerBytes({ status: 200, headers, body: "" }, "keep", true)).toThrow(/cannot be sent/);
    }
  });
});
