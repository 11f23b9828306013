// The listeners of one tollgate, one entry each. A new front end is its file(s) in frontends/, its
// settings in config/ and one entry here: start-up, readiness, signals, start-up problems and the
// WORKERS supervisor iterate over this list and name no listener themselves.
import type { Tollgate } from "./app.js";
import type { Config } from "./config/env.js";
import { createCheckListener } from "./frontends/check-listener.js";
import { authorizationService } from "./frontends/envoy-grpc/ext-authz.js";
import { createGrpcListener } from "./frontends/envoy-grpc/listener.js";
import { rateLimitService } from "./frontends/envoy-grpc/rls-service.js";
import { envoyHttp } from "./frontends/envoy-http.js";
import type { Listener } from "./frontends/listener.js";
import { nginx } from "./frontends/nginx.js";
import { rlsJsonRoute } from "./frontends/rls-json.js";
import { httpListener } from "./http/http-listener.js";
import { createThrottledLog } from "./process/throttled-log.js";

export function createListeners(config: Config, tollgate: Tollgate): Listener[] {
  const full = createThrottledLog({
    logger: tollgate.checks.logger,
    level: "warn",
    event: "connections_full",
    message: "a listener holds MAX_CONNECTIONS connections: new ones are closed as they arrive",
    periodMs: 60_000,
  });
  /** Per listener: MAX_CONNECTIONS, and a line a minute while connections past it are closed. */
  const bounded = (listener: string) => ({
    maxConnections: config.maxConnections,
    onFull: () => full(listener, { listener, maxConnections: config.maxConnections }),
  });
  return [
    httpListener(
      {
        name: "public",
        host: config.host,
        port: config.port,
        settings: { host: "HOST", port: "PORT" },
        ...bounded("public"),
      },
      tollgate.publicApp,
    ),
    createCheckListener(
      {
        name: "check",
        host: config.checkHost,
        port: config.checkPort,
        settings: { host: "CHECK_HOST", port: "CHECK_PORT" },
        ...bounded("check"),
      },
      tollgate.checks,
      [envoyHttp, nginx, rlsJsonRoute(() => tollgate.rls?.decide, tollgate.checks.tracing)],
    ),
    createGrpcListener(
      {
        name: "grpc",
        host: config.grpcHost,
        port: config.grpcPort,
        settings: { host: "GRPC_HOST", port: "GRPC_PORT" },
        ...bounded("grpc"),
      },
      tollgate.checks,
      {
        services: [
          authorizationService(tollgate.checks),
          ...(tollgate.rls === undefined
            ? []
            : [rateLimitService(tollgate.rls.decide, tollgate.checks.tracing)]),
        ],
        tls: config.grpcTls,
      },
    ),
    httpListener(
      {
        name: "admin",
        host: config.adminHost,
        port: config.adminPort,
        settings: { host: "ADMIN_HOST", port: "ADMIN_PORT" },
        ...bounded("admin"),
      },
      tollgate.adminApp,
    ),
  ];
}
