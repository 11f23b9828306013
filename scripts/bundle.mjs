// Replaces tsc's dist/src/main.js with one bundled file of tollgate and its pure-JavaScript
// dependencies: Node then resolves, reads and links one module instead of several hundred, which is
// most of the start-up time. Run by `npm run build` after tsc; the other files in dist/ stay as tsc
// wrote them (the CLIs, the bench and the tests import them).
//
// Left outside the bundle and loaded from node_modules as usual: packages that find their own files
// at run time through __dirname (ioredis reads its package.json, pino starts worker files), and
// pino-pretty, a dev dependency that is used only when it is installed; and the OpenTelemetry SDK,
// imported only when tracing is on (src/tracing/otel.ts), which the bundle must not load at start.
// Not @opentelemetry/api: prom-client requires it at start, so it stays in the bundle as before.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const EXTERNAL = [
  "ioredis",
  "pino",
  "pino-pretty",
  "@opentelemetry/core",
  "@opentelemetry/exporter-trace-otlp-http",
  "@opentelemetry/exporter-trace-otlp-proto",
  "@opentelemetry/resources",
  "@opentelemetry/sdk-trace-base",
];

/**
 * Files read at run time sit next to the module that reads them (the Lua scripts next to
 * dist/src/store/redis/loader.js, the .proto files next to dist/src/frontends/envoy-grpc/protos.js);
 * in the bundle, import.meta.url is dist/src/main.js. The one place in each module that locates
 * them is rewritten, and the build fails if that place is not found exactly once.
 */
const ASSET_DIRECTORIES = [
  { module: /[\\/]store[\\/]redis[\\/]loader\.js$/, from: "./lua/", to: "./store/redis/lua/" },
  {
    module: /[\\/]frontends[\\/]envoy-grpc[\\/]protos\.js$/,
    from: "./proto/",
    to: "./frontends/envoy-grpc/proto/",
  },
];

const assetDirectories = {
  name: "asset-directories",
  setup(context) {
    for (const { module, from, to } of ASSET_DIRECTORIES) {
      context.onLoad({ filter: module }, (args) => {
        const located = `new URL("${from}", import.meta.url)`;
        const text = readFileSync(args.path, "utf8");
        const count = text.split(located).length - 1;
        if (count !== 1) throw new Error(`${args.path}: expected ${located} once, found it ${count} times`);
        return { contents: text.replace(located, `new URL("${to}", import.meta.url)`), loader: "js" };
      });
    }
  },
};

const CJS_REQUIRE =
  'import { createRequire as __tollgateRequire } from "node:module";\n' +
  "const require = __tollgateRequire(import.meta.url);";

const entry = join(root, "dist", "src", "main.js");
if (readFileSync(entry, "utf8").startsWith(CJS_REQUIRE)) {
  process.stderr.write("scripts/bundle.mjs: dist/src/main.js is already a bundle; run npm run build\n");
  process.exit(1);
}

await build({
  entryPoints: [entry],
  outfile: entry,
  allowOverwrite: true,
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20.19",
  external: EXTERNAL,
  // CommonJS dependencies call require() for Node's built-in modules.
  banner: { js: CJS_REQUIRE },
  sourcemap: true,
  plugins: [assetDirectories],
  logLevel: "warning",
});
