# syntax=docker/dockerfile:1
# tollgate and the demo upstream in one image: `node dist/src/main.js` (default) or
# `node dist/upstream/main.js`, and the `tollgate` command. Build: docker build -t tollgate:local .

# Node 24, the current LTS line (Node 20 reached its end of life on 2026-04-30); package.json's
# engines floor stays 20.19, and .ci/run tests on both.
FROM node:24-bookworm-slim AS build
WORKDIR /app
# Dependencies first, so that source edits do not invalidate the npm ci layer.
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
COPY upstream ./upstream
# tsc -p tsconfig.build.json; scripts/bundle.mjs makes dist/src/main.js one file (fast start-up);
# scripts/copy-assets.mjs puts the .lua scripts next to the JS.
RUN npm run build

FROM node:24-bookworm-slim AS runtime
ENV NODE_ENV=production
# Outside production tollgate and the upstream listen on loopback unless HOST is set; a container
# must listen on its network interface.
ENV HOST=0.0.0.0
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
# The `tollgate` command (package.json bin) on PATH: docker exec <container> tollgate users list.
RUN ln -s /app/dist/src/cli/main.js /usr/local/bin/tollgate
# The node image's unprivileged user; the app writes nothing to disk (logs go to stdout).
USER node
# 8080 public API, 9191 check (Envoy/nginx only), 8081 gRPC check (Envoy ext_authz over gRPC),
# 9090 admin + metrics, 8000 demo upstream.
EXPOSE 8080 9191 8081 9090 8000
# tollgate drains on SIGTERM (finishes requests in flight, closes Redis, exits 0).
STOPSIGNAL SIGTERM
CMD ["node", "dist/src/main.js"]
