// A tollgate's listeners, exactly as src/listeners.ts lists them, on loopback ports the system picks.
import type { Tollgate } from "../../src/app.js";
import type { Config } from "../../src/config/env.js";
import { createListeners } from "../../src/listeners.js";

export type Serving = {
  /** The base URL of the listener named `name` ("public", "check", "admin", "grpc"). */
  url(name: string): string;
  /** Drains the listener named `name` as a stop does, and resolves once its connections have closed. */
  drain(name: string): Promise<void>;
  /** Closes every listener at once, connections in flight included. */
  close(): Promise<void>;
};

export async function serveListeners(config: Config, tollgate: Tollgate): Promise<Serving> {
  const loopback = "127.0.0.1";
  const listeners = createListeners(
    {
      ...config,
      host: loopback,
      checkHost: loopback,
      adminHost: loopback,
      grpcHost: loopback,
      port: 0,
      checkPort: 0,
      adminPort: 0,
      grpcPort: 0,
    },
    tollgate,
  );
  await Promise.all(listeners.map((listener) => listener.start()));
  const named = (name: string) => {
    const listener = listeners.find((l) => l.name === name);
    if (listener === undefined) throw new Error(`no listener named ${name}`);
    return listener;
  };
  return {
    url: (name) => `http://${loopback}:${named(name).port}`,
    drain(name) {
      const listener = named(name);
      listener.drain();
      return listener.stop();
    },
    async close() {
      await Promise.all(listeners.map((listener) => listener.stop({ force: true })));
    },
  };
}
