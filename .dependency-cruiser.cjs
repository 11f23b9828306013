// Dependencies point one way: http → authz / auth / ratelimit (logic and ports) ← store (adapters),
// with config below everything; main.ts, app.ts and workers.ts compose. `npm run check` fails on any
// import these rules forbid and on any cycle.
const FEATURES = "^src/(auth|authz|ratelimit)/";
module.exports = {
  forbidden: [
    { name: "no-cycles", severity: "error", from: {}, to: { circular: true } },
    {
      name: "features-never-import-adapters-or-the-edge",
      comment:
        "Feature folders hold logic and port types; the adapters and HTTP are wired in by the composition root.",
      severity: "error",
      from: { path: FEATURES },
      to: { path: "^src/(store|http)/|^src/(app|main|workers)\\.ts$" },
    },
    {
      name: "config-is-below-everything",
      severity: "error",
      from: { path: "^src/config/" },
      to: { path: "^src/(auth|authz|ratelimit|store|http|metrics)/|^src/(app|main|workers)\\.ts$" },
    },
    {
      name: "the-edge-never-imports-adapters",
      comment: "http/ gets its ports from the composition root (http/api-store.ts is the shape it needs).",
      severity: "error",
      from: { path: "^src/http/" },
      to: { path: "^src/store/|^src/(app|main)\\.ts$" },
    },
    {
      name: "adapters-never-import-the-edge",
      severity: "error",
      from: { path: "^src/store/" },
      to: { path: "^src/(http|metrics)/|^src/(app|main|workers)\\.ts$" },
    },
    {
      name: "metrics-observe-only",
      severity: "error",
      from: { path: "^src/metrics/" },
      to: { path: "^src/(store|http|auth)/|^src/(app|main)\\.ts$" },
    },
    {
      name: "ioredis-only-in-the-redis-adapter",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/store/redis/" },
      to: { path: "node_modules/ioredis/" },
    },
    {
      name: "jsonwebtoken-only-in-jwt",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/auth/jwt\\.ts$" },
      to: { path: "node_modules/jsonwebtoken/" },
    },
    {
      name: "express-only-in-http",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/(http/|app\\.ts$)" },
      to: { path: "node_modules/express/" },
    },
    {
      name: "prom-client-only-in-metrics",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/(metrics/|workers\\.ts$)" },
      to: { path: "node_modules/prom-client/" },
    },
    {
      name: "the-upstream-stands-alone",
      severity: "error",
      from: { path: "^upstream/" },
      to: { path: "^src/" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { extensions: [".ts", ".js"] },
  },
};
