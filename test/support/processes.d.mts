// Types of processes.mjs for the TypeScript tests.
import type { ChildProcess } from "node:child_process";

export declare const ROOT: string;

export type RunningProcess = {
  name: string;
  child: ChildProcess;
  /** Everything the process wrote to stdout and stderr so far (its last 8 MiB). */
  output(): string;
  alive(): boolean;
  /** Sends `signal` (the process's stop signal unless told) and resolves with the exit code; SIGKILL after `killAfterMs`. */
  stop(signal?: NodeJS.Signals, killAfterMs?: number): Promise<number | null>;
};

export declare function startProcess(options: {
  name: string;
  command: string;
  args?: readonly string[];
  env?: Record<string, string>;
  cwd?: string;
  stopSignal?: NodeJS.Signals;
  exitSignal?: NodeJS.Signals;
}): RunningProcess;
export declare function trackedNames(): Map<number | undefined, string>;
export declare function stopAll(killAfterMs?: number): Promise<void>;
export declare function stopAllOnSignals(label: string): void;

export type RedisServer = {
  port: number;
  url: string;
  /** The running redis-server; undefined after kill() or stop() until restart(). */
  process(): RunningProcess | undefined;
  /** SIGKILL: the abrupt loss that production sees. */
  kill(): Promise<void>;
  /** Starts it again on the same port. */
  restart(): Promise<void>;
  stop(): Promise<void>;
};
export declare function startRedisServer(options?: { port?: number; name?: string }): Promise<RedisServer>;

export type TollgatePorts = { port: number; checkPort: number; adminPort: number; grpcPort: number };
export declare function freeTollgatePorts(): Promise<TollgatePorts>;
export declare function tollgateEnv(ports: TollgatePorts): Record<string, string>;

export type TollgateProcess = RunningProcess &
  TollgatePorts & {
    url: string;
    checkUrl: string;
    /** The gRPC listener, as http://127.0.0.1:port. */
    grpcUrl: string;
    adminUrl: string;
    adminToken: string;
  };
export type TollgateOptions = {
  readyMs?: number;
  main?: string;
  nodeArgs?: readonly string[];
  name?: string;
  workers?: number;
  waitForDemoUsers?: boolean;
};
export declare function startTollgate(
  env?: Record<string, string>,
  options?: TollgateOptions,
): Promise<TollgateProcess>;

export type UpstreamProcess = RunningProcess & { port: number; url: string };
export declare function startUpstream(): Promise<UpstreamProcess>;

export type NginxOptions = {
  checkPort?: number;
  publicPort?: number;
  upstreamPort: number;
  workers?: number;
  checkTimeout?: string;
  template?: string;
  prefix?: string;
  name?: string;
  /** tollgate's API_KEY_HEADER, when not the default. */
  apiKeyHeader?: string;
  /** render.mjs's API_KEY_FORWARD: true forwards an API key to the upstream. */
  apiKeyForward?: boolean;
};
export type Nginx = RunningProcess & { port: number; url: string; errorLog(): string };
export declare function startNginx(options: NginxOptions): Promise<Nginx>;
