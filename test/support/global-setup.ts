// Global test setup: one real redis-server for the run (or REDIS_URL), and dist/ built when sources changed.
import { execFileSync } from "node:child_process";
import type { TestProject } from "vitest/node";
import { type RedisServer, startRedisServer } from "./redis-server.js";

declare module "vitest" {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

let server: RedisServer | undefined;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Tests that run the real processes (workers, e2e) use the compiled output.
  execFileSync(process.execPath, ["scripts/ensure-built.mjs"], { stdio: "inherit" });
  const given = process.env.REDIS_URL;
  if (given !== undefined && given !== "") {
    project.provide("redisUrl", given);
  } else {
    server = await startRedisServer();
    project.provide("redisUrl", server.url);
  }
  return async () => {
    await server?.stop();
  };
}
