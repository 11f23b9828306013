// What the check listener's server, its connections and its routes share: a request as a route is
// handed it (Exchange), what the server gives each connection, and the phases a connection is in.
import type { Answer } from "./answer.js";
import type { Head, Headers } from "./head.js";

/** Where an exchange's answer is written: its connection, which sends answers in request order. */
export type Responder = { respond(exchange: Exchange, answer: Answer): void };

/** What a route is handed: the request, and the one answer it gives (later ones are dropped). */
export class Exchange {
  readonly method: string;
  readonly url: string;
  readonly headers: Headers;
  /** The body, for a route that reads it. */
  body: Buffer | undefined;
  answered = false;

  constructor(
    head: Head,
    readonly remoteAddress: string | undefined,
    private readonly connection: Responder,
  ) {
    this.method = head.method;
    this.url = head.url;
    this.headers = head.headers;
  }

  respond(answer: Answer): void {
    this.connection.respond(this, answer);
  }
}

/** What the server gives its connections: the route's hooks, the limits, the shared state. */
export type ConnectionContext = {
  /** Whether a request to `url` wants its body read (else it is dropped as it arrives). */
  wantsBody(url: string): boolean;
  serve(exchange: Exchange): void;
  /** A body a route reads: refused 413 past maxBodyBytes, 503 past heldBytes across connections. */
  maxBodyBytes: number;
  maxHeldBytes: number;
  maxHeaderBytes: number;
  /** Body bytes held now by every connection's unfinished requests. */
  held: { bytes: number };
  /** The server's clock in seconds (its sweep's ticks), and whether it is draining. */
  now(): number;
  draining(): boolean;
  /** An answer could not be written (logged; the connection is closed). */
  onError(error: unknown): void;
};

export const Phase = {
  /** Reading a request's head (from its first byte, or from the connection's start). */
  Head: 0,
  /** Reading its body. */
  Body: 1,
  /** The request is read; its answer is awaited. */
  Wait: 2,
  /** Between requests. */
  Idle: 3,
  /** An answer that closes the connection was written; what still comes is dropped. */
  Closing: 4,
} as const;
export type Phase = (typeof Phase)[keyof typeof Phase];
