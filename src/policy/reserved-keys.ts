// Keys that JavaScript objects treat specially, found anywhere in a parsed document (policy, request body).
import { fieldPath } from "../config/problems.js";

/**
 * A record or a copy built from a document sets the prototype on "__proto__" instead of a field
 * (zod drops such a key without a word), and "constructor" and "prototype" shadow what every
 * object or function has.
 */
export const RESERVED_KEYS: ReadonlySet<string> = new Set(["__proto__", "constructor", "prototype"]);

/** A value to look into, and the key it has under its parent (the path is rebuilt only for a problem). */
type Frame = { value: unknown; key: PropertyKey; parent: Frame | undefined };

function pathOf(frame: Frame): PropertyKey[] {
  const path: PropertyKey[] = [];
  for (let f: Frame | undefined = frame; f !== undefined; f = f.parent) path.push(f.key);
  return path.reverse();
}

/**
 * Every reserved key of the document (at most `max`), in document order, each naming its field.
 * Walked with a stack of its own, not by recursion: a request body nested thousands deep is a
 * 400, not a stack overflow.
 */
export function reservedKeyProblems(document: unknown, max = Number.POSITIVE_INFINITY): string[] {
  const problems: string[] = [];
  const stack: Frame[] = [];
  // A YAML alias repeats an object: each is walked once (and a recursive alias cannot loop).
  const seen = new Set<object>();
  const expand = (value: unknown, parent: Frame | undefined): void => {
    if (value === null || typeof value !== "object" || seen.has(value)) return;
    seen.add(value);
    const entries: [PropertyKey, unknown][] = Array.isArray(value)
      ? [...value.entries()]
      : Object.entries(value);
    for (let i = entries.length - 1; i >= 0; i -= 1) {
      const [key, item] = entries[i] as [PropertyKey, unknown];
      stack.push({ value: item, key, parent });
    }
  };
  expand(document, undefined);
  while (stack.length > 0 && problems.length < max) {
    const frame = stack.pop() as Frame;
    if (typeof frame.key === "string" && RESERVED_KEYS.has(frame.key)) {
      problems.push(
        `${fieldPath(pathOf(frame))}: reserved key "${frame.key}": JavaScript objects treat it specially; rename or remove it`,
      );
    } else {
      expand(frame.value, frame);
    }
  }
  return problems;
}
