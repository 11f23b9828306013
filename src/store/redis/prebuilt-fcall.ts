// An FCALL written as one RESP text built here, for a single Redis or Sentinel's master. ioredis's
// own command flattens and walks its arguments several times (Array.prototype.flat, then a string
// per argument when it writes): measured on a call of 6 keys and 10 arguments, 16-22 µs of Node
// CPU per call through redis.callBuffer against 11-13 µs this way, the write included
// (docs/performance.md). Every check waits on one such call. A Cluster routes a command by its
// keys, which a prebuilt command does not show ioredis: there the stock call is used.
import { Command } from "ioredis";

type Arg = string | Buffer | number;

/** A command whose wire text is already built; ioredis queues it and matches its reply as any other. */
class PrebuiltCommand extends Command {
  private readonly text: string;

  constructor(text: string, buffers: boolean) {
    super("fcall", [], { replyEncoding: buffers ? null : "utf8" });
    this.text = text;
  }

  override toWritable(): string {
    return this.text;
  }
}

const bulk = (value: string): string => `$${Buffer.byteLength(value)}\r\n${value}\r\n`;

/**
 * FCALL `fn` with its keys and arguments as one command, its reply as Buffers (`buffers`) or
 * strings; undefined when an argument is a Buffer (the stock call sends those).
 */
export function prebuiltFcall(
  fn: string,
  keys: readonly string[],
  args: readonly Arg[],
  buffers: boolean,
): Command | undefined {
  let text = `*${3 + keys.length + args.length}\r\n$5\r\nFCALL\r\n${bulk(fn)}${bulk(String(keys.length))}`;
  for (const key of keys) text += bulk(key);
  for (const arg of args) {
    if (typeof arg === "string") text += bulk(arg);
    else if (typeof arg === "number") text += bulk(String(arg));
    else return undefined;
  }
  return new PrebuiltCommand(text, buffers);
}
