// The CLI's exit codes and its one error type: a message of one line, never a stack trace.

/** Documented in docs/cli.md; scripts branch on them. */
export const EXIT = {
  ok: 0,
  /** A file is invalid, a check is denied, or the admin API refused the request (4xx). */
  failed: 1,
  /** Bad arguments or options. */
  usage: 2,
  /** The admin API cannot be reached, refused the admin token, or failed (5xx). */
  unreachable: 3,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export class CliError extends Error {
  readonly exitCode: ExitCode;
  /** More lines after the message, each one problem (a policy's problems on a refused reload). */
  readonly details: readonly string[];
  /** The admin API's HTTP status, when it answered. */
  readonly status: number | undefined;
  constructor(
    exitCode: ExitCode,
    message: string,
    options: { details?: readonly string[]; status?: number } = {},
  ) {
    super(message);
    this.name = "CliError";
    this.exitCode = exitCode;
    this.details = options.details ?? [];
    this.status = options.status;
  }
}
