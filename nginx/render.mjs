// Renders nginx.conf.template into a directory with its included files: for deployments and tests alike.
// Usage: node nginx/render.mjs OUT_DIR LISTEN=0.0.0.0:80 CHECK_ADDR=tollgate:9191 PUBLIC_ADDR=tollgate:8080 \
//          UPSTREAM_ADDR=app:8000 PREFIX=/var/lib/tollgate-nginx [WORKERS=auto] [CHECK_TIMEOUT=1s]
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const NGINX_DIR = fileURLToPath(new URL(".", import.meta.url));
export const INCLUDED_FILES = ["tollgate-check.conf", "tollgate-limit-headers.conf"];
const DEFAULTS = { WORKERS: "auto", CHECK_TIMEOUT: "1s" };

/** Fills every {{NAME}} of `template`; a placeholder without a value is an error, never left empty. */
export function renderTemplate(template, values) {
  return template.replace(/\{\{([A-Z_]+)\}\}/g, (_, name) => {
    const value = values[name] ?? DEFAULTS[name];
    if (value === undefined) throw new Error(`nginx template: no value for {{${name}}}`);
    return value;
  });
}

/**
 * Writes OUT_DIR/nginx.conf from `template` (nginx/nginx.conf.template by default) and, for that
 * template, the files it includes; returns the path of nginx.conf.
 */
export function writeNginxConfig({ dir, values, template = join(NGINX_DIR, "nginx.conf.template") }) {
  mkdirSync(dir, { recursive: true });
  const conf = join(dir, "nginx.conf");
  writeFileSync(conf, renderTemplate(readFileSync(template, "utf8"), values));
  for (const file of INCLUDED_FILES) copyFileSync(join(NGINX_DIR, file), join(dir, file));
  return conf;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [dir, ...pairs] = process.argv.slice(2);
  if (dir === undefined) {
    console.error("usage: node nginx/render.mjs OUT_DIR NAME=VALUE ...");
    process.exit(2);
  }
  const values = Object.fromEntries(
    pairs.map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]),
  );
  console.log(writeNginxConfig({ dir, values }));
}
