// One connection of the check listener's HTTP/1.1 server: its requests one at a time, in order.
// A request's head is read whole, then its body (kept for a route that reads it, else dropped as it
// arrives); the next request is read only once this one is answered, so that answers can never
// leave in another order than their requests came (a pipelining client gets them in order).
import type { Socket } from "node:net";
import { type Answer, answerBytes, type Ending, errorBytes, tooLarge, unavailable } from "./answer.js";
import { BodyError, type BodyReader, chunkedBody, KeptBody, lengthBody } from "./body.js";
import { type ConnectionContext, Exchange, Phase } from "./exchange.js";
import { parseHead } from "./head.js";

const HEAD_END = Buffer.from("\r\n\r\n");
const CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n";

export class Connection {
  phase: Phase = Phase.Head;
  /** When the phase began (server seconds); for Body, when the request began. */
  since: number;
  private current: Exchange | undefined;
  private ending: Ending = "keep";
  private withBody = true;
  private body: BodyReader | undefined;
  /** The body kept for a route that reads it; undefined while dropped. */
  private kept: KeptBody | undefined;
  private pending: Buffer | undefined;
  private at = 0;
  /** The buffer grown here that `pending` begins, with room past it to append to (append). */
  private room: Buffer | undefined;
  /** Bytes of `pending` from `at` already searched for the end of a head. */
  private searched = 0;
  private pumping = false;
  /** The client has sent its FIN: the connection closes after the last request it sent. */
  private ended = false;

  constructor(
    readonly socket: Socket,
    private readonly context: ConnectionContext,
  ) {
    this.since = context.now();
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", () => socket.destroy());
    socket.on("close", () => this.release());
    socket.on("drain", () => this.phase === Phase.Idle && this.next());
    socket.on("end", () => {
      this.ended = true;
      // A head or a body that can no longer arrive whole; a body dropped waits for its answer (respond).
      if (this.phase === Phase.Head || (this.phase === Phase.Idle && this.pending === undefined))
        this.close();
      else if (this.phase === Phase.Body && this.kept !== undefined)
        this.fail(400, "bad_request", "The body ended early");
      else if (this.phase === Phase.Body && this.current?.answered === true) this.close();
    });
  }

  /** Whether bytes were read that no request has used yet (pipelined requests). */
  private get unread(): boolean {
    return this.pending !== undefined && this.at < this.pending.length;
  }

  /** Between two requests: a drain closes it. A new connection is not (node:http's rule): its first request is answered. */
  get idle(): boolean {
    return this.phase === Phase.Idle && !this.unread;
  }

  private onData(chunk: Buffer): void {
    if (this.phase === Phase.Closing) return;
    if (this.phase === Phase.Idle) this.begin();
    if (this.pending === undefined) {
      this.pending = chunk;
      this.at = 0;
    } else {
      this.pending = this.append(this.pending, chunk);
    }
    this.pump();
  }

  /** The unread rest of `pending`, then `chunk`: grown by doubling, not copied whole every read. */
  private append(pending: Buffer, chunk: Buffer): Buffer {
    const rest = pending.length - this.at;
    const length = rest + chunk.length;
    let room = this.room;
    if (this.at !== 0 || room === undefined || pending.buffer !== room.buffer || length > room.length) {
      // Doubled up to the head's bound, past which a head is refused (431) and a pipeline paused.
      room = Buffer.allocUnsafeSlow(Math.max(length, Math.min(2 * length, this.context.maxHeaderBytes)));
      pending.copy(room, 0, this.at);
      this.room = room;
      this.at = 0;
    }
    chunk.copy(room, rest);
    return room.subarray(0, length);
  }

  private begin(): void {
    this.phase = Phase.Head;
    this.since = this.context.now();
  }

  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.pending !== undefined) {
        const progressed = this.step(this.pending);
        if (this.pending !== undefined && this.at >= this.pending.length) this.drop();
        if (!progressed) break;
      }
    } catch (error) {
      if (!(error instanceof BodyError)) throw error;
      this.fail(400, "bad_request", `The request's body is not valid chunked encoding: ${error.message}`);
    } finally {
      this.pumping = false;
    }
    // After the client's FIN, a head still unfinished (or blank lines alone) can never be read whole.
    if (this.ended && this.phase === Phase.Head) this.close();
    else if (this.phase === Phase.Wait && (this.pending?.length ?? 0) > this.context.maxHeaderBytes) {
      // A client pipelining faster than its answers: read no more until this one is answered.
      this.socket.pause();
    }
  }

  /** One step of reading `data` from `this.at`; false when more bytes (or the answer) must come first. */
  private step(data: Buffer): boolean {
    switch (this.phase) {
      case Phase.Head:
        return this.readHead(data);
      case Phase.Body: {
        this.at = (this.body as BodyReader).feed(
          data,
          this.at,
          this.kept === undefined ? undefined : this.keep,
        );
        if (!(this.body as BodyReader).done) return false;
        this.bodyRead();
        return true;
      }
      case Phase.Idle:
        // Answers the client has not read yet fill the socket's buffer: the next request waits for them.
        if (this.socket.writableNeedDrain) return false;
        this.begin();
        return true;
      default:
        return false;
    }
  }

  private readHead(data: Buffer): boolean {
    // Empty lines before a request line are ignored (RFC 9112 section 2.2).
    while (data[this.at] === 0x0d && data[this.at + 1] === 0x0a) this.at += 2;
    if (this.at >= data.length) return false;
    // From where the last search stopped (less 3 bytes: the end may straddle two reads).
    const end = data.indexOf(HEAD_END, this.at + Math.max(0, this.searched - 3));
    this.searched = end === -1 ? data.length - this.at : 0;
    const size = (end === -1 ? data.length : end) - this.at;
    if (size > this.context.maxHeaderBytes) {
      this.fail(431, "bad_request", "The request headers are too large", data);
      return false;
    }
    if (end === -1) return false;
    const head = parseHead(data.toString("latin1", this.at, end));
    if ("status" in head) {
      this.fail(head.status, "bad_request", head.message, data);
      return false;
    }
    this.at = end + 4;
    const exchange = new Exchange(head, this.socket.remoteAddress, this);
    this.current = exchange;
    this.ending = head.keepAlive ? (head.http10 ? "keep-1.0" : "keep") : "close";
    this.withBody = head.method !== "HEAD";
    if (head.body === 0) {
      this.phase = Phase.Wait;
      this.context.serve(exchange);
      return true;
    }
    this.body = head.body === "chunked" ? chunkedBody() : lengthBody(head.body);
    if (head.expectsContinue) this.socket.write(CONTINUE);
    this.phase = Phase.Body;
    if (!this.context.wantsBody(head.url)) {
      // The route does not read it: answered now, the body dropped as it comes.
      this.context.serve(exchange);
    } else if (typeof head.body === "number" && head.body > this.context.maxBodyBytes) {
      this.tooLarge();
    } else {
      const { held, maxBodyBytes, maxHeldBytes } = this.context;
      this.kept = new KeptBody(typeof head.body === "number" ? head.body : maxBodyBytes, held, maxHeldBytes);
    }
    return true;
  }

  /** Keeps a chunk of a body a route reads, within its bounds. */
  private readonly keep = (chunk: Buffer): void => {
    const kept = this.kept;
    // Refused earlier in this same read: the rest is dropped.
    if (kept === undefined) return;
    if (kept.size + chunk.length > this.context.maxBodyBytes) {
      this.tooLarge();
    } else if (!kept.add(chunk)) {
      this.release();
      (this.current as Exchange).respond(unavailable);
    }
  };

  private tooLarge(): void {
    this.release();
    (this.current as Exchange).respond(tooLarge(this.context.maxBodyBytes));
  }

  /** Gives back the body bytes held (the body was read, refused, or its connection closed). */
  private release(): void {
    this.kept?.release();
    this.kept = undefined;
  }

  private bodyRead(): void {
    const exchange = this.current as Exchange;
    this.body = undefined;
    if (exchange.answered) {
      this.finish();
      return;
    }
    this.phase = Phase.Wait;
    if (this.kept !== undefined) {
      exchange.body = this.kept.data;
      this.release();
      this.context.serve(exchange);
    }
  }

  respond(exchange: Exchange, answer: Answer): void {
    if (exchange.answered || exchange !== this.current || this.socket.destroyed) return;
    exchange.answered = true;
    // After the client's FIN, the requests it sent before it are still answered, the last with close.
    const ending = this.context.draining() || (this.ended && !this.unread) ? "close" : this.ending;
    this.ending = ending;
    try {
      // latin1: a header's text as node:http sends it (a string answer's body is ASCII).
      this.socket.write(answerBytes(answer, ending, this.withBody), "latin1");
    } catch (error) {
      this.context.onError(error);
      this.socket.destroy();
      return;
    }
    // Answered before its body was read whole (a check, a refusal): the rest is dropped first, if it can come.
    if (this.phase === Phase.Wait || this.ended) this.finish();
  }

  /** The request is read and answered: on to the next, or closed. */
  private finish(): void {
    this.current = undefined;
    if (this.ending === "close") {
      this.close();
      return;
    }
    this.phase = Phase.Idle;
    this.since = this.context.now();
    this.next();
  }

  /**
   * Reads on, unless the client has not read the answers written (node:http too stops past the
   * socket's high-water mark): else one that pipelines and never reads had them all held. On 'drain'.
   */
  private next(): void {
    if (this.socket.writableNeedDrain) {
      this.socket.pause();
      return;
    }
    if (this.socket.isPaused()) this.socket.resume();
    if (this.pending !== undefined) this.pump();
  }

  /** Ends the connection once what was written is sent; anything still arriving is dropped. */
  close(): void {
    this.phase = Phase.Closing;
    this.since = this.context.now();
    this.drop();
    this.socket.end();
  }

  /** Forgets what was read and not used. */
  private drop(): void {
    this.pending = undefined;
    this.room = undefined;
  }

  /**
   * A request that cannot be served: its JSON error, and the connection closed. `data`, when the
   * head could not be read, tells whether it was a HEAD (whose answer has no body).
   */
  fail(status: number, error: string, message: string, data?: Buffer): void {
    if (this.current?.answered === true || this.socket.destroyed) {
      this.socket.destroy();
      return;
    }
    const head =
      data === undefined ? !this.withBody : data.toString("latin1", this.at, this.at + 5) === "HEAD ";
    if (this.current !== undefined) this.current.answered = true;
    this.release();
    this.socket.write(errorBytes(status, error, message, !head), "latin1");
    this.close();
  }
}
