// What the CLI prints: aligned tables and key-value lines for people, the API's JSON for scripts (--json).

type Cell = string | number | boolean | null | undefined;

/** What a terminal must never get raw from a stored text: controls, line breaks, bidi controls. */
const UNSAFE = /[\p{Cc}\p{Zl}\p{Zp}\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu;
/** UNSAFE less what JSON.stringify escapes itself (C0): DEL, C1 controls (CSI among them), and the rest. */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

const escaped = (c: string): string => `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, "0")}`;

/**
 * Text that came from the admin API (a key's name, a username), safe to print: every character
 * that could move the cursor, recolour or clear the screen, break the line or reorder it is shown
 * as `\uXXXX` instead. Names stored before such characters were refused may still hold them.
 */
export const printable = (text: string): string => text.replace(UNSAFE, escaped);

const text = (cell: Cell): string => (cell === null || cell === undefined ? "-" : printable(String(cell)));

/** Columns padded to their widest cell, headers in capitals; "(none)" for no rows. */
export function table(headers: readonly string[], rows: readonly (readonly Cell[])[]): string {
  if (rows.length === 0) return "(none)\n";
  const cells = [headers.map((h) => h.toUpperCase()), ...rows.map((row) => row.map(text))];
  const widths = headers.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? "").length)));
  return cells
    .map((row) =>
      row
        .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
        .join("  ")
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join("");
}

/** `key: value` lines, the keys aligned. */
export function fields(entries: readonly (readonly [string, Cell])[]): string {
  const width = Math.max(...entries.map(([key]) => key.length)) + 1;
  return entries.map(([key, value]) => `${`${key}:`.padEnd(width)} ${text(value)}\n`).join("");
}

/** The API's JSON as it is, the characters in UNSAFE_IN_JSON written as escapes (the same JSON value). */
export const json = (value: unknown): string =>
  `${JSON.stringify(value, null, 2).replace(UNSAFE_IN_JSON, escaped)}\n`;

export function print(out: string): void {
  process.stdout.write(out);
}
