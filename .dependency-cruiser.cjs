// Dependencies point one way: frontends / http → check / auth / ratelimit / policy (logic and ports)
// ← store (adapters), with config below everything and process/ beside it; main.ts, app.ts, reloads.ts and
// listeners.ts compose; cli/ (the tollgate command) stands outside, a client of the admin API.
// `npm run check` fails on any import these rules forbid and on any cycle.
const FEATURES = "^src/(auth|check|ratelimit|policy|rls)/";
const EDGE = "^src/(frontends|http)/";
const ADAPTERS = "^src/store/(memory|redis)/|^src/store/store\\.ts$";
const ROOT = "^src/(app|main|listeners|reloads)\\.ts$";
module.exports = {
  forbidden: [
    { name: "no-cycles", severity: "error", from: {}, to: { circular: true } },
    {
      name: "features-never-import-adapters-or-the-edge",
      comment:
        "Feature folders hold logic and port types; the adapters and the edge are wired in by the composition root.",
      severity: "error",
      from: { path: FEATURES },
      to: { path: `${ADAPTERS}|${EDGE}|${ROOT}|^src/process/workers\\.ts$` },
    },
    {
      name: "config-is-below-everything",
      severity: "error",
      from: { path: "^src/config/" },
      to: { path: `${FEATURES}|^src/(store|frontends|http|metrics|process)/|${ROOT}` },
    },
    {
      name: "rls-config-is-pure",
      comment:
        "src/rls/ reads the RLS configuration and matches descriptors: no store, no network, no metrics (the RLS front end and the store side use it).",
      severity: "error",
      from: { path: "^src/rls/" },
      to: { path: `^src/(store|frontends|http|metrics|process)/|${ROOT}|^(node:)?(net|tls|dgram)$` },
    },
    {
      name: "policy-is-below-the-check",
      comment: "The policy (schema, routes, request targets, compilation) knows nothing of checks or stores.",
      severity: "error",
      from: { path: "^src/policy/" },
      to: { path: "^src/(check|store)/" },
    },
    {
      name: "the-edge-never-imports-adapters",
      comment:
        "frontends/ and http/ get their ports from the composition root (http/api-store.ts is the shape the APIs need).",
      severity: "error",
      from: { path: EDGE },
      to: { path: `${ADAPTERS}|${ROOT}` },
    },
    {
      name: "adapters-never-import-the-edge",
      severity: "error",
      from: { path: "^src/store/" },
      to: { path: `${EDGE}|^src/(metrics|check)/|${ROOT}|^src/process/workers\\.ts$` },
    },
    {
      name: "metrics-observe-only",
      severity: "error",
      from: { path: "^src/metrics/" },
      to: { path: `^src/(store|auth)/|${EDGE}|${ROOT}` },
    },
    {
      name: "only-front-ends-speak-protocols",
      comment:
        "node:http, node:http2, gRPC libraries and protobuf belong to the front ends (frontends/ for checks, http/ for the APIs); the composition root only wires their listeners, as values.",
      severity: "error",
      from: { path: "^src/", pathNot: EDGE },
      to: {
        path: "^(node:)?(http|http2)$|node_modules/@grpc/|node_modules/protobufjs/|node_modules/express/",
      },
    },
    {
      name: "tracing-observes-only",
      comment:
        "src/tracing/ makes spans of what the edge and the composition root hand it: it reaches no store, no service and no protocol.",
      severity: "error",
      from: { path: "^src/tracing/" },
      to: { path: `^src/(store|auth)/|${EDGE}|${ROOT}` },
    },
    {
      name: "opentelemetry-sdk-only-in-otel",
      comment:
        "The OpenTelemetry SDK is imported on demand by src/tracing/otel.ts alone, so that a tollgate without tracing never loads it; the semantic conventions are constants, bundled.",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/tracing/otel\\.ts$" },
      to: { path: "node_modules/@opentelemetry/(?!semantic-conventions/)" },
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
      from: { path: "^src/", pathNot: "^src/http/" },
      to: { path: "node_modules/express/" },
    },
    {
      name: "prom-client-only-in-metrics",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/(metrics/|process/workers\\.ts$)" },
      to: { path: "node_modules/prom-client/" },
    },
    {
      name: "the-cli-is-a-client",
      comment:
        "src/cli/ (the tollgate command) reads files with the policy and RLS loaders and reaches the rest through the admin API only; nothing imports it.",
      severity: "error",
      from: { path: "^src/cli/" },
      to: { path: `^src/(auth|check|ratelimit|store|frontends|http|metrics|process)/|${ROOT}` },
    },
    {
      name: "nothing-imports-the-cli",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/cli/" },
      to: { path: "^src/cli/" },
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
