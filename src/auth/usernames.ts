// Usernames: the one canonical form that uniqueness, lookup and the login lockout use, and the names refused at creation.
import { z } from "zod";

/** The longest username, as typed and once canonical (a compatibility form may grow: "ﬃ" is "ffi"). */
export const MAX_USERNAME_LENGTH = 64;

/**
 * The form under which two usernames are one user: NFKC (fullwidth letters, ligatures, the Kelvin
 * sign and other compatibility forms become the plain ones), case folded, then NFKC again.
 * JavaScript has no case folding: lower → upper → lower folds as Unicode's full case folding does
 * ("ß", "ẞ" and "ss" meet, final and medial sigma meet, "ᾈ" meets "ἀι"), where a plain toLowerCase
 * would not, except that it also folds the dotless "ı" into "i": one lookalike more is refused. The
 * mappings are the locale-independent ones, so the form is the same on every host. Idempotent.
 */
export function canonicalUsername(name: string): string {
  return name.normalize("NFKC").toLowerCase().toUpperCase().toLowerCase().normalize("NFKC");
}

/** Characters no username may hold, first match named; bidi controls before the format class they are in. */
const REFUSED_CHARACTERS: readonly { pattern: RegExp; what: string }[] = [
  { pattern: /\p{Cs}/u, what: "half of a surrogate pair (not text)" },
  { pattern: /\p{Cc}/u, what: "control characters" },
  { pattern: /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u, what: "bidirectional text controls" },
  { pattern: /[\p{Zl}\p{Zp}]/u, what: "line or paragraph separators" },
  { pattern: /\p{Cf}/u, what: "invisible format characters" },
  // Fillers, variation selectors and the like: letters or marks by category, invisible all the same.
  { pattern: /\p{Default_Ignorable_Code_Point}/u, what: "invisible characters" },
  { pattern: /\p{Co}/u, what: "private-use characters" },
  // Unassigned today, they may gain case or compatibility mappings tomorrow and change the form.
  { pattern: /\p{Cn}/u, what: "characters that Unicode does not assign" },
];

/** UTS #39 section 5.4: more nonspacing marks than this on one letter are refused. */
const MAX_MARKS_IN_A_ROW = 4;

/**
 * Letters whose own dot hides a combining dot above (U+0307), so that "i\u0307" looks like "i":
 * the soft-dotted ones (i, j, į, ɨ, mathematical i…) and the dotless ı and ȷ, which the dot makes
 * look like i and j. Other marks after the base may come between (i + dot below + dot above). Not
 * l: a dot above sits over its ascender, where it shows.
 */
const HIDDEN_DOT = /[\p{Soft_Dotted}\u0131\u0237]\p{Mn}*\u0307/u;
const LEADING_MARK = /^\p{M}/u;
const REPEATED_MARK = /(\p{Mn})\1/u;
const MARK_PILE = new RegExp(`\\p{Mn}{${MAX_MARKS_IN_A_ROW + 1}}`, "u");

/**
 * The checks of UTS #39 section 5.4 on combining marks, in the fully decomposed form (so that a
 * fullwidth "ｉ" or a precomposed letter is seen as its base and marks): names that render like
 * another name, or pile up marks to hide or overlay what is under them. Undefined when all is well.
 */
function markProblem(name: string): string | undefined {
  const decomposed = name.normalize("NFKD");
  const leading = LEADING_MARK.exec(decomposed);
  if (leading !== null) {
    return `must not begin with a combining mark (${codePoint(leading[0])}): a mark needs a letter under it`;
  }
  const repeated = REPEATED_MARK.exec(decomposed);
  if (repeated !== null) {
    return `must not repeat a combining mark on one letter (${codePoint(repeated[1] ?? "")} twice in a row)`;
  }
  if (MARK_PILE.test(decomposed)) {
    return `must not put more than ${MAX_MARKS_IN_A_ROW} combining marks on one letter`;
  }
  const hidden = HIDDEN_DOT.exec(decomposed);
  if (hidden !== null) {
    return `must not put a combining dot above (U+0307) on "${[...hidden[0]][0]}", whose own dot hides it`;
  }
  return undefined;
}

/** The scripts of Unicode (ISO 15924 codes) as of Unicode 17; Common and Inherited belong to none. */
const SCRIPT_CODES = `Adlm Aghb Ahom Arab Armi Armn Avst Bali Bamu Bass Batk Beng Berf Bhks Bopo Brah Brai
  Bugi Buhd Cakm Cans Cari Cham Cher Chrs Copt Cpmn Cprt Cyrl Deva Diak Dogr Dsrt Dupl Egyp Elba Elym
  Ethi Gara Geor Glag Gong Gonm Goth Gran Grek Gujr Gukh Guru Hang Hani Hano Hatr Hebr Hira Hluw Hmng
  Hmnp Hung Ital Java Kali Kana Kawi Khar Khmr Khoj Kits Knda Krai Kthi Lana Laoo Latn Lepc Limb Lina
  Linb Lisu Lyci Lydi Mahj Maka Mand Mani Marc Medf Mend Merc Mero Mlym Modi Mong Mroo Mtei Mult Mymr
  Nagm Nand Narb Nbat Newa Nkoo Nshu Ogam Olck Onao Orkh Orya Osge Osma Ougr Palm Pauc Perm Phag Phli
  Phlp Phnx Plrd Prti Rjng Rohg Runr Samr Sarb Saur Sgnw Shaw Shrd Sidd Sidt Sind Sinh Sogd Sogo Sora
  Soyo Sund Sunu Sylo Syrc Tagb Takr Tale Talu Taml Tang Tavt Tayo Telu Tfng Tglg Thaa Thai Tibt Tirh
  Tnsa Todr Tols Toto Tutg Ugar Vaii Vith Wara Wcho Xpeo Xsux Yezi Yiii Zanb`.split(/\s+/);

type Script = { code: string; pattern: RegExp };

/**
 * Each script this runtime's Unicode knows, matched by Script_Extensions (a character shared by
 * several scripts, like the Japanese prolonged sound mark, belongs to each). An older runtime that
 * lacks a newer script also lacks its characters, which it refuses as unassigned.
 */
const SCRIPTS: readonly Script[] = SCRIPT_CODES.flatMap((code) => {
  try {
    return [{ code, pattern: new RegExp(`\\p{scx=${code}}`, "u") }];
  } catch {
    return [];
  }
});

/** Digits, "_", "-", ".", punctuation, combining marks: characters of no one script. */
const NO_SCRIPT = /[\p{scx=Zyyy}\p{scx=Zinh}]/u;

/** UTS #39's "highly restrictive" mixes: Latin with the scripts of Japanese, Chinese or Korean writing. */
const WRITING_SYSTEMS: readonly RegExp[] = [
  /^[\p{scx=Latn}\p{scx=Hani}\p{scx=Hira}\p{scx=Kana}\p{scx=Zyyy}\p{scx=Zinh}]*$/u,
  /^[\p{scx=Latn}\p{scx=Hani}\p{scx=Bopo}\p{scx=Zyyy}\p{scx=Zinh}]*$/u,
  /^[\p{scx=Latn}\p{scx=Hani}\p{scx=Hang}\p{scx=Zyyy}\p{scx=Zinh}]*$/u,
];

const scriptNames = new Intl.DisplayNames(["en"], { type: "script", fallback: "code" });
export const codePoint = (c: string): string =>
  `U+${(c.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, "0")}`;

/** Why `name` mixes scripts beyond UTS #39's "highly restrictive" level, or undefined. */
function scriptProblem(name: string): string | undefined {
  const letters = [...name].filter((c) => !NO_SCRIPT.test(c));
  const first = letters[0];
  if (first === undefined || WRITING_SYSTEMS.some((system) => system.test(name))) return undefined;
  const own = SCRIPTS.filter((s) => s.pattern.test(first));
  if (own.some((s) => letters.every((c) => s.pattern.test(c)))) return undefined;
  const script = own[0];
  const stranger = letters.find((c) => script === undefined || !script.pattern.test(c)) ?? first;
  const theirs = SCRIPTS.find((s) => s.pattern.test(stranger));
  if (script === undefined || theirs === undefined) {
    return `holds a character of a script this server does not know ("${stranger}", ${codePoint(stranger)})`;
  }
  return (
    `mixes the ${scriptNames.of(script.code)} and ${scriptNames.of(theirs.code)} scripts ` +
    `("${stranger}", ${codePoint(stranger)}): use one script, or Latin with Han and Hiragana/Katakana, Bopomofo or Hangul`
  );
}

/**
 * Why a new username is refused (a phrase to follow the field's name: "must not contain …"), or
 * undefined when it may be created.
 */
export function usernameProblem(name: string): string | undefined {
  if (name.length === 0) return "must not be empty";
  const canonical = canonicalUsername(name);
  if (name.length > MAX_USERNAME_LENGTH || canonical.length > MAX_USERNAME_LENGTH) {
    return `must be at most ${MAX_USERNAME_LENGTH} characters, also once normalised`;
  }
  // The form as typed is what people see; the canonical one is what the store keys: both must be clean.
  for (const form of [name, canonical]) {
    for (const { pattern, what } of REFUSED_CHARACTERS) {
      const found = pattern.exec(form);
      if (found !== null) {
        const at = [...form.slice(0, found.index)].length + 1;
        return `must not contain ${what} (${codePoint(found[0])} at character ${at})`;
      }
    }
    if (/^\s|\s$/u.test(form)) return "must not begin or end with a space";
  }
  return markProblem(name) ?? scriptProblem(name) ?? scriptProblem(canonical);
}

/** A new username (admin API, USERS_FILE): any problem is the field's, named. Stored as typed. */
export const newUsernameSchema = z.string().superRefine((name, ctx) => {
  const problem = usernameProblem(name);
  if (problem !== undefined) ctx.addIssue({ code: "custom", message: problem });
});
