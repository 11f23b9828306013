// Usernames: one canonical form (NFKC and case folding), and the names refused at creation.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalUsername, usernameProblem } from "../../src/auth/usernames.js";
import { usernameSubject } from "../../src/ratelimit/types.js";

describe("the canonical form of a username", () => {
  it.each([
    ["Alice", "alice"],
    ["ALICE", "alice"],
    ["ａｌｉｃｅ", "alice"], // fullwidth
    ["ﬁona", "fiona"], // ligature
    ["\u212Aarl", "karl"], // Kelvin sign
    ["Straße", "strasse"],
    ["STRASSE", "strasse"],
    ["\u1E9Ee", "sse"], // capital sharp s
    ["ΟΔΥΣΣΕΥΣ", "οδυσσευς"],
    ["οδυσσευσ", "οδυσσευς"], // final sigma meets medial sigma
    ["Ⅻ_legion", "xii_legion"], // roman numeral
    ["ı", "i"], // dotless i: folded further than Unicode's case folding does
  ])("makes %s and %s one name", (typed, canonical) => {
    expect(canonicalUsername(typed)).toBe(canonical);
  });

  it("keeps apart names that only look alike across scripts (those are refused at creation instead)", () => {
    expect(canonicalUsername("аlice")).not.toBe("alice"); // Cyrillic а
    expect(canonicalUsername("alice\u200b")).not.toBe("alice");
  });

  it("is idempotent and blind to case, for any text", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 24 }), (name) => {
        const canonical = canonicalUsername(name);
        expect(canonicalUsername(canonical)).toBe(canonical);
        expect(canonicalUsername(name.toUpperCase())).toBe(canonical);
        expect(canonicalUsername(name.toLowerCase())).toBe(canonical);
      }),
      { numRuns: 2_000 },
    );
  });

  it("keys the login lockout of every form of a name on one subject", () => {
    expect(usernameSubject("Alice")).toBe(usernameSubject("alice"));
    expect(usernameSubject("ＡＬＩＣＥ")).toBe(usernameSubject("alice"));
    expect(usernameSubject("аlice")).not.toBe(usernameSubject("alice"));
  });
});

describe("a new username", () => {
  it.each([
    "alice",
    "Alice",
    "bob_pro",
    "ent.carol-2",
    "Renée",
    "алиса_1", // Cyrillic with digits and "_", which belong to no script
    "Οδυσσέας",
    "山田_taro", // Han and Latin
    "やまだtaro", // Hiragana and Latin (Japanese)
    "ラーメン", // Katakana with the prolonged sound mark, shared by Hiragana and Katakana
    "山田やまだ", // Han and Hiragana
    "ㄅ山kim", // Bopomofo, Han and Latin (Chinese)
    "김철수kim", // Hangul and Latin (Korean)
    "0123456789",
    "Nguyễn", // two different marks on one letter, decomposed
    "İstanbul", // capital I with a dot above: the dot shows
    "l\u0307ukas", // l + dot above: the dot sits over the ascender, where it shows
    "e\u0301\u0302\u0303\u0304", // four marks on one letter: the most allowed
  ])("may be %s", (name) => {
    expect(usernameProblem(name)).toBeUndefined();
  });

  it.each([
    ["alice\u200b", "must not contain invisible format characters (U+200B at character 6)"],
    ["\u202eecila", "must not contain bidirectional text controls (U+202E at character 1)"],
    ["ali\u2066ce", "must not contain bidirectional text controls (U+2066 at character 4)"],
    ["ali\u00adce", "must not contain invisible format characters (U+00AD at character 4)"],
    ["\ufeffalice", "must not contain invisible format characters (U+FEFF at character 1)"],
    ["alice\u{E0041}", "must not contain invisible format characters (U+E0041 at character 6)"],
    ["alice\u2028", "must not contain line or paragraph separators (U+2028 at character 6)"],
    ["alice\u2029x", "must not contain line or paragraph separators (U+2029 at character 6)"],
    ["a\u0007b", "must not contain control characters (U+0007 at character 2)"],
    ["alice\u0085", "must not contain control characters (U+0085 at character 6)"],
    ["ali\u3164ce", "must not contain invisible characters (U+3164 at character 4)"],
    ["alice\ufe0f", "must not contain invisible characters (U+FE0F at character 6)"],
    ["alice\ue000", "must not contain private-use characters (U+E000 at character 6)"],
    ["alice\u0378", "must not contain characters that Unicode does not assign (U+0378 at character 6)"],
    ["\ud800alice", "must not contain half of a surrogate pair (not text) (U+D800 at character 1)"],
    [" alice", "must not begin or end with a space"],
    ["alice\u00a0", "must not begin or end with a space"],
    ["", "must not be empty"],
    ["a".repeat(65), "must be at most 64 characters, also once normalised"],
    ["ß".repeat(33), "must be at most 64 characters, also once normalised"],
  ])("refuses %j, naming the problem", (name, problem) => {
    expect(usernameProblem(name)).toBe(problem);
  });

  it.each([
    ["аlice", "Cyrillic", "Latin", "l", "U+006C"], // a Cyrillic а first
    ["paypаl", "Latin", "Cyrillic", "а", "U+0430"],
    ["αlpha", "Greek", "Latin", "l", "U+006C"],
    ["김やまだ", "Hangul", "Hiragana", "や", "U+3084"], // Korean and Japanese do not mix
    ["ㄅやま", "Bopomofo", "Hiragana", "や", "U+3084"],
  ])(
    "refuses %s, which mixes scripts, naming them and the first stranger",
    (name, own, other, char, code) => {
      expect(usernameProblem(name)).toBe(
        `mixes the ${own} and ${other} scripts ("${char}", ${code}): use one script, or Latin with Han and Hiragana/Katakana, Bopomofo or Hangul`,
      );
    },
  );

  it.each([
    ["\u0301alice", "must not begin with a combining mark (U+0301): a mark needs a letter under it"],
    ["\u0301\u0302\u0303", "must not begin with a combining mark (U+0301): a mark needs a letter under it"],
    [`bob${"\u0336".repeat(20)}`, "must not repeat a combining mark on one letter (U+0336 twice in a row)"],
    ["bo\u0308\u0308b", "must not repeat a combining mark on one letter (U+0308 twice in a row)"],
    ["bo\u0301\u0302\u0303\u0304\u0306b", "must not put more than 4 combining marks on one letter"],
    ["ali\u0307ce", 'must not put a combining dot above (U+0307) on "i", whose own dot hides it'],
    ["j\u0307ack", 'must not put a combining dot above (U+0307) on "j", whose own dot hides it'],
    ["al\u0131\u0307ce", 'must not put a combining dot above (U+0307) on "ı", whose own dot hides it'],
    ["\u0237\u0307ack", 'must not put a combining dot above (U+0307) on "ȷ", whose own dot hides it'],
    ["al\uff49\u0307ce", 'must not put a combining dot above (U+0307) on "i", whose own dot hides it'], // fullwidth i
    ["ali\u0323\u0307ce", 'must not put a combining dot above (U+0307) on "i", whose own dot hides it'],
    ["\u012f\u0307", 'must not put a combining dot above (U+0307) on "i", whose own dot hides it'], // į decomposed
  ])("refuses %j, whose combining marks hide or overlay letters, naming the problem", (name, problem) => {
    expect(usernameProblem(name)).toBe(problem);
  });

  it("refuses a name whose canonical form mixes scripts even when the typed one looks single-script", () => {
    // The micro sign is of no script; its canonical form is the Greek mu.
    expect(usernameProblem("a\u00b5")).toMatch(/^mixes the Latin and Greek scripts/);
  });
});
