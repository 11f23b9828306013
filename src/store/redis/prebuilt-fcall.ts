// An FCALL written as one RESP text built here, for a single Redis or Sentinel's master. ioredis's
// own command flattens and walks its arguments several times (Array.prototype.flat, then a string
// per argument when it writes): measured on a call of 6 keys and 10 arguments, 16-22 µs of Node
// CPU per call through redis.callBuffer against 11-13 µs this way, the write included
// (docs/performance.md). Every check waits on one such call. A Cluster routes a command by its
// keys, which a prebuilt command does not show ioredis: there a stock command is used.
import { Command } from "ioredis";

type Arg = string | Buffer | number;

/**
 * An FCALL that waits for Redis's answer however late it comes, without ioredis's backstop timer
 * (commandTimeout): a limiter call has its caller's own deadline, and its late answer is what lets
 * a withdrawn call take back what it counted (see Withdrawal). It still fails with its connection,
 * and the backlog bound (backlog.ts) keeps their number finite while Redis does not answer.
 */
class UntimedFcall extends Command {
  constructor(args: Arg[], buffers: boolean) {
    super("fcall", args, { replyEncoding: buffers ? null : "utf8" });
  }

  override setTimeout(): void {}
}

/** An FCALL whose wire text is already built; ioredis queues it and matches its reply as any other. */
class PrebuiltCommand extends Command {
  private readonly text: string;
  private readonly timed: boolean;

  constructor(text: string, buffers: boolean, timed: boolean) {
    super("fcall", [], { replyEncoding: buffers ? null : "utf8" });
    this.text = text;
    this.timed = timed;
  }

  override toWritable(): string {
    return this.text;
  }

  /** Set by ioredis (commandTimeout) on every command it sends; an untimed call goes without it, as UntimedFcall. */
  override setTimeout(ms: number): void {
    if (this.timed) super.setTimeout(ms);
  }
}

/** FCALL `fn` as a stock command (routed by its keys on a Cluster), without ioredis's backstop timer. */
export const untimedFcall = (
  fn: string,
  keys: readonly string[],
  args: readonly Arg[],
  buffers: boolean,
): Command => new UntimedFcall([fn, keys.length, ...keys, ...args], buffers);

const bulk = (value: string): string => `$${Buffer.byteLength(value)}\r\n${value}\r\n`;

/**
 * FCALL `fn` with its keys and arguments as one command, its reply as Buffers (`buffers`) or
 * strings; undefined when an argument is a Buffer (the stock call sends those). `timed: false`: no
 * backstop timer (see UntimedFcall).
 */
export function prebuiltFcall(
  fn: string,
  keys: readonly string[],
  args: readonly Arg[],
  buffers: boolean,
  timed = true,
): Command | undefined {
  let text = `*${3 + keys.length + args.length}\r\n$5\r\nFCALL\r\n${bulk(fn)}${bulk(String(keys.length))}`;
  for (const key of keys) text += bulk(key);
  for (const arg of args) {
    if (typeof arg === "string") text += bulk(arg);
    else if (typeof arg === "number") text += bulk(String(arg));
    else return undefined;
  }
  return new PrebuiltCommand(text, buffers, timed);
}
