// Starts and stops a real redis-server on a free loopback port for tests.
import { type ChildProcess, spawn } from "node:child_process";
import { connect } from "node:net";
import { findBinary } from "./binaries.js";
import { stopOnExit } from "./leftovers.mjs";
import { freePort, redisServerArgs, waitFor } from "./ports.js";

export type RedisServer = {
  port: number;
  url: string;
  /** SIGKILL: the abrupt loss that production sees. */
  kill(): Promise<void>;
  /** Starts it again on the same port. */
  restart(): Promise<void>;
  stop(): Promise<void>;
};

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.setTimeout(500);
    socket.on("connect", () => socket.write("PING\r\n"));
    socket.on("data", (data) => {
      resolve(data.toString().startsWith("+PONG"));
      socket.destroy();
    });
    socket.on("error", () => resolve(false));
    socket.on("timeout", () => {
      resolve(false);
      socket.destroy();
    });
  });
}

export async function startRedisServer(options: { port?: number } = {}): Promise<RedisServer> {
  const binary = findBinary("redis-server");
  const port = options.port ?? (await freePort());
  let child: ChildProcess | undefined;

  const launch = async (): Promise<void> => {
    child = stopOnExit(spawn(binary, redisServerArgs(port), { stdio: "ignore" }));
    await waitFor(() => ping(port), 10_000, `redis-server on port ${port}`);
  };
  const halt = async (signal: NodeJS.Signals): Promise<void> => {
    const current = child;
    child = undefined;
    if (current === undefined || current.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      current.once("exit", () => resolve());
      current.kill(signal);
    });
  };

  await launch();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    kill: () => halt("SIGKILL"),
    restart: launch,
    stop: () => halt("SIGTERM"),
  };
}
