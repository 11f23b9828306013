// What the CLI prints: aligned tables and key-value lines for people, the API's JSON for scripts (--json).

type Cell = string | number | boolean | null | undefined;

const text = (cell: Cell): string => (cell === null || cell === undefined ? "-" : String(cell));

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

export const json = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`;

export function print(out: string): void {
  process.stdout.write(out);
}
