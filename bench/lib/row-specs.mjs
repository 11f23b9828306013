// The default run's rows: the ceilings, the check rows per algorithm and identity, gRPC, RLS, nginx.
import { CHECK_METHOD, GRPC_CEILING_METHOD } from "./grpc.mjs";
import { GRPC_HEADERS } from "./h2load.mjs";
import { identityRows } from "./identity.mjs";
import { windowBytes } from "./redis-stats.mjs";
import { rlsRows } from "./rls.mjs";
import { KEY_PREFIX } from "./services.mjs";
import { bearer, HUGE } from "./setup.mjs";
import { tracingRows } from "./tracing.mjs";

export const BENCH_POLICY = "the bench's policy";
export const tollgateRow = { redis: true, tollgate: true, ceiling: "store-ceiling", servers: ["tollgate"] };

/** The sliding counter's and gcra's allowed and denied rows, against one tollgate's check URL. */
export function algorithmRows(core, { checkUrl, idSuffix, labelPrefix }) {
  return ["counter", "gcra"].flatMap((name) => {
    const algorithm = name === "gcra" ? "gcra" : "sliding-counter";
    return [
      {
        ...tollgateRow,
        id: `allowed-${name}${idSuffix}`,
        short: `allowed, ${name}${idSuffix === "" ? "" : ", compare build"}`,
        label: `${labelPrefix}, allowed, ${algorithm}: Envoy, ${HUGE} → 200`,
        url: checkUrl,
        headers: bearer(core.byAlgorithm[`bench_${name}`]),
        expected: 200,
      },
      {
        ...tollgateRow,
        id: `denied-${name}${idSuffix}`,
        short: `denied, ${name}${idSuffix === "" ? "" : ", compare build"}`,
        label: `${labelPrefix}, denied, ${algorithm}: Envoy, 1/1h spent → 429`,
        url: checkUrl,
        headers: bearer(core.byAlgorithm[`bench_${name}_low`]),
        expected: 429,
      },
    ];
  });
}

/**
 * The gRPC ceiling and the gRPC Check's allowed and denied rows, and the HTTP ceiling and check rows
 * loaded by h2load too (HTTP/1.1, as many connections as autocannon's): the same load generator on
 * both sides, since autocannon costs the shared cores several times what h2load does. None when the
 * gRPC rows are skipped.
 */
function grpcRows(core, around) {
  const { grpc } = around;
  if (grpc.skipped !== undefined) return [];
  const { binary, requestBytes, streams, connections } = grpc;
  const load = `h2load, ${streams} streams over ${connections} connections`;
  const h1 = `h2load --h1, ${streams} connections`;
  const shared = { requestBytes, streams, connections };
  const grpcLoad = (bodyFile) => ({ h2load: { binary, bodyFile }, headers: GRPC_HEADERS });
  const check = (bodyFile, expectCode, expectOutcome) => ({
    ...tollgateRow,
    ...grpcLoad(bodyFile),
    ceiling: "grpc-ceiling",
    url: `${core.tollgate.grpcUrl}${CHECK_METHOD}`,
    expected: 200,
    grpc: { ...shared, bodyFile, expectCode, expectOutcome },
  });
  const httpCheck = (session, expected) => ({
    ...tollgateRow,
    ceiling: "own-ceiling-h2load",
    url: core.checkUrl,
    headers: bearer(session),
    expected,
    h2load: { binary, h1: true },
  });
  return [
    {
      id: "http-ceiling-h2load",
      short: "HTTP ceiling, h2load",
      label: `HTTP ceiling: bare node:http, loaded by h2load (${h1}) → 200`,
      url: `${around.httpCeiling.url}/`,
      expected: 200,
      servers: ["http ceiling"],
      h2load: { binary, h1: true },
    },
    {
      id: "own-ceiling-h2load",
      short: "own HTTP ceiling, h2load",
      label: `HTTP ceiling of the checks: the check listener's own HTTP/1.1 server answering 200, loaded by h2load (${h1}) → 200`,
      url: `${around.ownCeiling.url}/`,
      expected: 200,
      servers: ["own http ceiling"],
      h2load: { binary, h1: true },
    },
    {
      ...httpCheck(core.bob, 200),
      id: "allowed-h2load",
      short: "allowed, h2load",
      label: `tollgate check, allowed: as the allowed row, loaded by h2load (${h1}) → 200`,
    },
    {
      ...httpCheck(core.alice, 429),
      id: "denied-h2load",
      short: "denied, h2load",
      label: `tollgate check, denied: as the denied row, loaded by h2load (${h1}) → 429`,
    },
    {
      ...httpCheck(core.alice, 429),
      id: "denied-cached-h2load",
      short: "denied, cached, h2load",
      label: `tollgate check, denied with the denial cache on: as the cached row, loaded by h2load (${h1}) → 429`,
      url: `${around.cached.checkUrl}/ext_authz/api/products`,
      server: around.cached,
      servers: ["tollgate (denial cache)"],
    },
    {
      id: "grpc-ceiling",
      short: "gRPC ceiling",
      label: `gRPC ceiling: an empty unary method on tollgate's gRPC server stack (${load}) → OK`,
      url: `${grpc.ceiling.url}${GRPC_CEILING_METHOD}`,
      expected: 200,
      servers: ["grpc ceiling"],
      ceiling: "http-ceiling-h2load",
      ...grpcLoad(grpc.bodies.ceiling),
      grpc: { ...shared, bodyFile: grpc.bodies.ceiling },
    },
    {
      ...check(grpc.bodies.allowed, 0, "allow ok"),
      id: "grpc-allowed",
      short: "gRPC allowed",
      label: `tollgate gRPC Check, allowed: as the allowed row (${load}) → OK`,
    },
    {
      ...check(grpc.bodies.denied, 8, "deny rate_limited"),
      id: "grpc-denied",
      short: "gRPC denied",
      label: `tollgate gRPC Check, denied: as the denied row (${load}) → RESOURCE_EXHAUSTED`,
    },
  ];
}

/** A ceiling that uses Redis: counted by its GET /count, compared with the HTTP ceiling. */
const redisCeilingRow = (id, short, label, server, processName) => ({
  id,
  short,
  label,
  url: `${server.url}/`,
  countUrl: `${server.url}/count`,
  expected: 200,
  servers: [processName],
  ceiling: "http-ceiling",
  redis: true,
});

export function rowSpecs(core, around, memory) {
  const { bob, carol, alice, checkUrl, redisClient } = core;
  return [
    {
      id: "http-ceiling",
      short: "HTTP ceiling",
      label: "HTTP ceiling: bare node:http → 200",
      url: `${around.httpCeiling.url}/`,
      expected: 200,
      servers: ["http ceiling"],
    },
    redisCeilingRow(
      "store-ceiling",
      "store ceiling",
      `store ceiling: node:http + 1 EVALSHA of a minimal sliding window (${HUGE}) → 200`,
      around.storeCeiling,
      "store ceiling",
    ),
    redisCeilingRow(
      "store-ceiling-coalesced",
      "store ceiling, coalesced",
      `store ceiling with its Redis writes coalesced per event-loop turn, as tollgate's (${HUGE}) → 200`,
      around.coalescedCeiling,
      "store ceiling (coalesced)",
    ),
    redisCeilingRow(
      "fixed-floor",
      "fixed-window floor",
      `fixed-window floor: node:http + 1 pipelined INCR + PEXPIRE (${HUGE}) → 200`,
      around.fixedFloor,
      "fixed ceiling",
    ),
    {
      ...tollgateRow,
      id: "allowed",
      short: "allowed",
      label: `tollgate check, allowed: Envoy, pro user, valid session, ${HUGE} → 200`,
      url: checkUrl,
      headers: bearer(bob),
      expected: 200,
      after: async () => {
        const w = await windowBytes(redisClient, `${KEY_PREFIX}{u:${bob.user_id}}:l:general`);
        memory.push({ id: "allowed-row", label: "the allowed row's window, right after the row", ...w });
      },
    },
    ...identityRows(core, tollgateRow, HUGE),
    {
      ...tollgateRow,
      id: "denied",
      short: "denied",
      label: "tollgate check, denied: Envoy, free user, 100/1h exhausted → 429",
      url: checkUrl,
      headers: bearer(alice),
      expected: 429,
    },
    ...tracingRows(core, around.tracing),
    ...grpcRows(core, around),
    ...rlsRows(core, around),
    ...algorithmRows(core, { checkUrl, idSuffix: "", labelPrefix: "tollgate check" }),
    {
      ...tollgateRow,
      id: "denied-cached",
      short: "denied, cached",
      label: "tollgate check, denied with the denial cache on (as the denied row) → 429",
      url: `${around.cached.checkUrl}/ext_authz/api/products`,
      headers: bearer(alice),
      expected: 429,
      server: around.cached,
      servers: ["tollgate (denial cache)"],
    },
    {
      ...tollgateRow,
      id: "anonymous",
      short: "anonymous",
      label: `tollgate check, anonymous: Envoy, no token on GET /api/products (IP window counted, ${HUGE}) → 401`,
      url: checkUrl,
      expected: 401,
    },
    {
      ...tollgateRow,
      id: "allowed-2-workers",
      short: "allowed, WORKERS=2",
      label: `tollgate check, allowed, WORKERS=2 (same build, Redis and user; ${HUGE}) → 200`,
      url: `${around.twoWorkers.checkUrl}/ext_authz/api/products`,
      headers: bearer(bob),
      expected: 200,
      server: around.twoWorkers,
      workers: 2,
      servers: ["tollgate (2 workers)"],
    },
    ...(around.compare === undefined
      ? []
      : [
          {
            ...tollgateRow,
            id: "allowed-compare",
            short: "allowed, compare build",
            label: `compare build: allowed (as the allowed row, on ${around.compare.policy}) → 200`,
            url: `${around.compare.checkUrl}/ext_authz/api/products`,
            headers: bearer(core.peers.bench_compare),
            expected: 200,
            server: around.compare,
            servers: ["tollgate (compare build)"],
          },
          {
            ...tollgateRow,
            id: "denied-compare",
            short: "denied, compare build",
            label: `compare build: denied (as the denied row, on ${around.compare.policy}) → 429`,
            url: `${around.compare.checkUrl}/ext_authz/api/products`,
            headers: bearer(alice),
            expected: 429,
            server: around.compare,
            servers: ["tollgate (compare build)"],
          },
          // The algorithm tiers are the bench policy's: on the built-in one there are none.
          ...(around.compare.policy !== BENCH_POLICY
            ? []
            : algorithmRows(core, {
                checkUrl: `${around.compare.checkUrl}/ext_authz/api/products`,
                idSuffix: "-compare",
                labelPrefix: "compare build",
              }).map((row) => ({ ...row, server: around.compare, servers: ["tollgate (compare build)"] }))),
        ]),
    {
      id: "nginx-direct",
      short: "nginx direct",
      label: "nginx → upstream directly: GET /api/products → 200",
      url: `${around.nginxDirect.url}/api/products`,
      expected: 200,
      servers: ["nginx (direct)", "upstream"],
    },
    {
      ...tollgateRow,
      id: "nginx-tollgate",
      short: "nginx + tollgate",
      label: `nginx + tollgate auth_request → upstream: GET /api/products, enterprise user, ${HUGE} → 200`,
      url: `${around.nginxTollgate.url}/api/products`,
      headers: bearer(carol),
      expected: 200,
      ceiling: "nginx-direct",
      servers: ["nginx (tollgate)", "upstream", "tollgate"],
    },
  ];
}
