// A connection error (RFC 9113 section 5.4.1): thrown inside frame handling, caught by the
// connection's reader, which sends GOAWAY with its code and closes.
export class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}
