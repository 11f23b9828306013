// Whole numbers written as text (a query's ?limit=, a limit's count and duration, the CLI's options):
// one grammar for all of them, so that no reader takes a form another refuses.

/**
 * Decimal digits with no sign, no leading zero, no space, no fraction and no exponent: `Number()`
 * alone would also read "0x10" as 16, "1e3" as 1000, "+5", " 5" and "5.0" as 5, and "010" as 10.
 */
const WHOLE_NUMBER = /^(?:0|[1-9][0-9]*)$/;

/** Whether `text` is a whole number in that one form, however large. */
export const isWholeNumberText = (text: string): boolean => WHOLE_NUMBER.test(text);

/**
 * The whole number `text` writes, when it is one from `min` to `max` (both at most
 * Number.MAX_SAFE_INTEGER); undefined otherwise. Its length is checked before it is converted, so a
 * thousand digits never become a float that rounds into the range.
 */
export function parseWholeNumber(text: string, min: number, max: number): number | undefined {
  if (!isWholeNumberText(text) || text.length > String(max).length) return undefined;
  const value = Number(text);
  return value >= min && value <= max ? value : undefined;
}

/** What parseWholeNumber takes, as a message says it. */
export const wholeNumberRange = (min: number, max: number): string =>
  `a whole number from ${min} to ${max}, in decimal digits only`;
