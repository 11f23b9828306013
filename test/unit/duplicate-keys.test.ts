// JSON bodies with a key written twice in one object: found as JSON.parse would read the keys,
// in any of the charsets the body parser takes, and nothing found in strings or valid bodies.
import { describe, expect, it } from "vitest";
import { bodyText, duplicateKey } from "../../src/http/duplicate-keys.js";

describe("duplicateKey", () => {
  it("finds a key given twice in one object, at any depth, as JSON.parse decodes it", () => {
    expect(duplicateKey('{"tier":"free","tier":"enterprise"}')).toBe("tier");
    expect(duplicateKey('{"a":1,"\\u0061":2}')).toBe("a");
    expect(duplicateKey('{"x":{"b":1,"b":2}}')).toBe("b");
    expect(duplicateKey('{"x":[{"c":1},{"c":2,"c":3}]}')).toBe("c");
    expect(duplicateKey('{"a":{"z":1},"a":2}')).toBe("a");
    expect(duplicateKey(' { "a" : 1 , "a" : 2 } ')).toBe("a");
  });

  it("finds none where each object holds each key once, braces and quotes in strings counting for nothing", () => {
    for (const text of [
      '{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}',
      '{"a":"}{\\"a\\":","b":"a"}',
      '{"a":"\\\\","b":1}',
      '["a","a"]',
      '{"general":["10/1s","10/1s"]}',
      "{}",
      "[]",
    ]) {
      expect(duplicateKey(text), text).toBeUndefined();
    }
  });

  it("leaves text that is no JSON to the parser", () => {
    for (const text of ['{"a', '{"a":1,"\\x":2,"\\x":3}', "", "{{{"])
      expect(duplicateKey(text), text).toBeUndefined();
  });
});

describe("bodyText", () => {
  const body = '{"a":1}';
  it("reads UTF-8, UTF-16 and UTF-32 in either byte order", () => {
    expect(bodyText(Buffer.from(body, "utf8"), "utf-8")).toBe(body);
    expect(bodyText(Buffer.from(body, "utf16le"), "utf-16le")).toBe(body);
    expect(bodyText(Buffer.from(body, "utf16le").swap16(), "utf-16be")).toBe(body);
    const le = Buffer.alloc(body.length * 4);
    for (let i = 0; i < body.length; i += 1) le.writeUInt32LE(body.charCodeAt(i), i * 4);
    expect(bodyText(le, "utf-32le")).toBe(body);
    expect(bodyText(Buffer.from(le).swap32(), "utf-32be")).toBe(body);
    expect(bodyText(Buffer.concat([Buffer.from([0xff, 0xfe, 0, 0]), le]), "utf-32")).toBe(`\ufeff${body}`);
  });

  it("gives up on bytes that are not in the charset", () => {
    expect(bodyText(Buffer.from([1, 2, 3]), "utf-32le")).toBeUndefined();
    expect(bodyText(Buffer.from([0xff, 0xff, 0xff, 0xff]), "utf-32be")).toBeUndefined();
    expect(bodyText(Buffer.from("x"), "no-such-charset")).toBeUndefined();
  });
});
