// The header that carries an API key (API_KEY_HEADER) is named in tollgate, in nginx's template and
// Envoy's files, by their renderers and in the docs: all of them agree on tollgate's default, and a
// renderer given another name puts it everywhere the default stood, and nowhere else. nginx's
// renderer reads API_KEY_FORWARD, which says whether the upstream gets the key, as tollgate does.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import {
  CONFIGS,
  DEFAULT_API_KEY_HEADER,
  parseCli as parseEnvoyCli,
  renderEnvoyConfig,
} from "../../envoy/render.mjs";
import { parseCli as parseNginxCli, renderTemplate } from "../../nginx/render.mjs";
import { RESERVED_HEADERS as RENDERERS_RESERVED } from "../../scripts/api-key-header.mjs";
import { Reader } from "../../src/config/env-reader.js";
import { parseIdentitySettings, RESERVED_HEADERS } from "../../src/config/identity-settings.js";

const ROOT = new URL("../../", import.meta.url);
const read = (path: string) => readFileSync(new URL(path, ROOT), "utf8");
const TEMPLATE = read("nginx/nginx.conf.template");
const NGINX_VALUES = {
  LISTEN: "127.0.0.1:8081",
  CHECK_ADDR: "127.0.0.1:9191",
  PUBLIC_ADDR: "127.0.0.1:8080",
  UPSTREAM_ADDR: "127.0.0.1:8000",
  PREFIX: "/tmp/tollgate-nginx",
};
const ADDRESSES = {
  check: { host: "127.0.0.1", port: 9191, ipv6: false },
  grpc: { host: "127.0.0.1", port: 8081, ipv6: false },
  public: { host: "127.0.0.1", port: 8080, ipv6: false },
  upstream: { host: "127.0.0.1", port: 8000, ipv6: false },
  listen: { host: "0.0.0.0", port: 10000, ipv6: false },
  admin: { host: "127.0.0.1", port: 9901, ipv6: false },
};
const DEFAULT = parseIdentitySettings(new Reader({})).apiKeyHeader;

/**
 * Every value of a field named `exact`, `header_name` or `regex` in a YAML text, and every item of a
 * `request_headers_to_remove` list, with its path.
 */
function headerFields(text: string): string[] {
  const found: string[] = [];
  const walk = (value: unknown, path: string) => {
    if (Array.isArray(value)) {
      for (const [i, v] of value.entries()) walk(v, `${path}[${i}]`);
    } else if (typeof value === "object" && value !== null) {
      for (const [key, v] of Object.entries(value)) {
        if (["exact", "header_name", "regex"].includes(key) && typeof v === "string")
          found.push(`${path}.${key}=${v}`);
        else if (key === "request_headers_to_remove" && Array.isArray(v))
          for (const [i, item] of v.entries()) found.push(`${path}.${key}[${i}]=${String(item)}`);
        else walk(v, `${path}.${key}`);
      }
    }
  };
  walk(parse(text), "");
  return found;
}

describe("the API key header in the shipped configurations and docs", () => {
  it("is tollgate's default, x-api-key, in nginx's template, Envoy's files, both renderers and the docs", () => {
    expect(DEFAULT).toBe("x-api-key");
    expect(DEFAULT_API_KEY_HEADER).toBe(DEFAULT);
    expect(renderTemplate(TEMPLATE, NGINX_VALUES)).toContain(`proxy_set_header ${DEFAULT} $http_x_api_key;`);
    expect(headerFields(read("envoy/envoy.yaml"))).toContainEqual(
      expect.stringMatching(/\.exact=x-api-key$/),
    );
    expect(headerFields(read("envoy/envoy-ratelimit.yaml"))).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/\.header_name=x-api-key$/),
        expect.stringMatching(/\.regex=x-api-key$/),
        expect.stringMatching(/\.request_headers_to_remove\[0\]=x-api-key$/),
      ]),
    );
    expect(read("docs/settings.md")).toMatch(/^\| `API_KEY_HEADER` +\| `x-api-key` +\|/m);
    const identity = read("docs/identity.md");
    expect(identity).toContain("`proxy_set_header x-api-key $http_x_api_key;`");
    expect(identity).toContain("node nginx/render.mjs … API_KEY_HEADER=");
    expect(identity).toContain("node envoy/render.mjs … --api-key-header ");
    expect(read("docs/envoy.md")).toContain("`--api-key-header <name>`");
  });

  it("renders nginx's check location with another header under its name and its $http_ variable", () => {
    const rendered = renderTemplate(TEMPLATE, { ...NGINX_VALUES, API_KEY_HEADER: "X-Client-Key" });
    expect(rendered).toContain("proxy_set_header X-Client-Key $http_x_client_key;");
    // Only the comment still names the default.
    const directives = rendered.split("\n").filter((line) => !line.trim().startsWith("#"));
    expect(directives.join("\n")).not.toMatch(/x_api_key|x-api-key|\{\{/i);
    const refused = parseNginxCli([
      "/tmp/out",
      ...Object.entries(NGINX_VALUES).map(([k, v]) => `${k}=${v}`),
      "API_KEY_HEADER=x-key;evil",
    ]);
    expect(refused.problems).toEqual([
      "API_KEY_HEADER=x-key;evil is not a header name (a-z 0-9 -) other than authorization",
    ]);
    expect(() => renderTemplate(TEMPLATE, { ...NGINX_VALUES, API_KEY_HEADER: "Authorization" })).toThrow(
      /API_KEY_HEADER=Authorization is a header the proxy or tollgate sets itself/,
    );
  });

  it("renders nginx's upstream locations without the key's headers, or with API_KEY_FORWARD=true without touching them", () => {
    const check = read("nginx/tollgate-check.conf");
    const directives = (values: Record<string, string>) =>
      renderTemplate(check, { ...NGINX_VALUES, ...values })
        .split("\n")
        .filter((line) => line.startsWith("proxy_set_header") && /x-client-key|authorization/i.test(line));
    expect(directives({ API_KEY_HEADER: "X-Client-Key" })).toEqual([
      'proxy_set_header X-Client-Key "";',
      "proxy_set_header Authorization $tg_upstream_authorization;",
    ]);
    // A header named in proxy_set_header goes as one value (nginx 1.22: the first copy alone); one
    // not named goes as the client sent it, every copy.
    expect(directives({ API_KEY_HEADER: "X-Client-Key", API_KEY_FORWARD: "true" })).toEqual([]);
  });

  it("renders Envoy's files with another header exactly where x-api-key stood, and nothing else changed", () => {
    for (const name of Object.keys(CONFIGS) as (keyof typeof CONFIGS)[]) {
      const before = headerFields(renderEnvoyConfig(name, ADDRESSES));
      const after = headerFields(renderEnvoyConfig(name, ADDRESSES, "X-Client-Key"));
      expect(after, name).toEqual(before.map((field) => field.replace(/=x-api-key$/, "=x-client-key")));
      const strip = (text: string) =>
        parse(text.replace(/^#.*\n/, "").replaceAll("x-client-key", "x-api-key"));
      expect(strip(renderEnvoyConfig(name, ADDRESSES, "X-Client-Key")), name).toEqual(
        strip(renderEnvoyConfig(name, ADDRESSES)),
      );
    }
    const flags = ["/tmp/out", "--check-addr", "127.0.0.1:9191", "--grpc-addr", "127.0.0.1:8081"];
    const both = [...flags, "--public-addr", "127.0.0.1:8080", "--upstream-addr", "127.0.0.1:8000"];
    expect(parseEnvoyCli(both, { API_KEY_HEADER: "x-client-key" }).apiKeyHeader).toBe("x-client-key");
    expect(
      parseEnvoyCli([...both, "--api-key-header", "x-other"], { API_KEY_HEADER: "x-client-key" })
        .apiKeyHeader,
    ).toBe("x-other");
    expect(parseEnvoyCli([...both, "--api-key-header", "a b"]).problems).toEqual([
      '--api-key-header "a b" is not a header name (a-z 0-9 -) other than authorization',
    ]);
  });

  it("refuses, in tollgate and both renderers alike, a header the proxies or tollgate set themselves", () => {
    expect([...RESERVED_HEADERS].sort()).toEqual([...RENDERERS_RESERVED].sort());
    const nginxArgs = ["/tmp/out", ...Object.entries(NGINX_VALUES).map(([k, v]) => `${k}=${v}`)];
    const envoyArgs = ["/tmp/out", "--check-addr", "127.0.0.1:9191", "--grpc-addr", "127.0.0.1:8081"];
    const envoyBoth = [...envoyArgs, "--public-addr", "127.0.0.1:8080", "--upstream-addr", "127.0.0.1:8000"];
    for (const name of ["X-Original-URI", "x-forwarded-for", "X-User-Id", "host", "traceparent"]) {
      const reader = new Reader({ API_KEY_HEADER: name });
      parseIdentitySettings(reader);
      expect(reader.problems, name).toEqual([
        `API_KEY_HEADER: ${name.toLowerCase()} is a header the proxy or tollgate sets itself`,
      ]);
      expect(parseNginxCli([...nginxArgs, `API_KEY_HEADER=${name}`], TEMPLATE, {}).problems, name).toEqual([
        `API_KEY_HEADER=${name} is a header the proxy or tollgate sets itself, not one for an API key`,
      ]);
      expect(parseEnvoyCli([...envoyBoth, "--api-key-header", name], {}).problems, name).toEqual([
        `--api-key-header "${name}" is a header the proxy or tollgate sets itself, not one for an API key`,
      ]);
    }
    // A name that merely contains one is fine.
    expect(parseNginxCli([...nginxArgs, "API_KEY_HEADER=x-user-id-key"], TEMPLATE, {}).problems).toEqual([]);
  });

  it("renders nginx with the environment's API_KEY_HEADER, as Envoy's renderer does", () => {
    const nginxArgs = ["/tmp/out", ...Object.entries(NGINX_VALUES).map(([k, v]) => `${k}=${v}`)];
    const env = { API_KEY_HEADER: "x-client-key" };
    expect(parseNginxCli(nginxArgs, TEMPLATE, env).values.API_KEY_HEADER).toBe("x-client-key");
    expect(parseNginxCli([...nginxArgs, "API_KEY_HEADER=x-other"], TEMPLATE, env).values.API_KEY_HEADER).toBe(
      "x-other",
    );
    expect(parseNginxCli(nginxArgs, TEMPLATE, {}).values.API_KEY_HEADER).toBeUndefined();
    expect(parseNginxCli(nginxArgs, TEMPLATE, { API_KEY_HEADER: "x-original-uri" }).problems).toEqual([
      "API_KEY_HEADER=x-original-uri is a header the proxy or tollgate sets itself, not one for an API key (from the environment)",
    ]);
  });
});

describe("API_KEY_FORWARD in tollgate and nginx's renderer", () => {
  const nginxArgs = ["/tmp/out", ...Object.entries(NGINX_VALUES).map(([k, v]) => `${k}=${v}`)];
  const tollgateForwards = (value: string) => {
    const reader = new Reader({ API_KEY_FORWARD: value });
    const { forwardApiKey } = parseIdentitySettings(reader);
    return reader.problems.length > 0 ? "refused" : String(forwardApiKey);
  };
  const rendererForwards = (cli: ReturnType<typeof parseNginxCli>) =>
    cli.problems.length > 0 ? "refused" : (cli.values.API_KEY_FORWARD ?? "false");

  it.each(["true", "TRUE", "True", " true ", "false", "False", "  ", "yes", "1"])(
    "reads %j from the environment and as an argument as tollgate reads it",
    (value) => {
      const expected = tollgateForwards(value);
      expect(rendererForwards(parseNginxCli(nginxArgs, TEMPLATE, { API_KEY_FORWARD: value }))).toBe(expected);
      // An argument with no value is refused as every other (a shell variable that was not set).
      if (value.trim() !== "") {
        expect(
          rendererForwards(parseNginxCli([...nginxArgs, `API_KEY_FORWARD=${value}`], TEMPLATE, {})),
        ).toBe(expected);
      }
    },
  );

  it("renders what it read: a value of another case drops or forwards as its lower case does", () => {
    const { values } = parseNginxCli(nginxArgs, TEMPLATE, { API_KEY_FORWARD: "TRUE" });
    const check = renderTemplate(read("nginx/tollgate-check.conf"), { ...NGINX_VALUES, ...values });
    expect(check).toContain('# API_KEY_FORWARD=true: proxy_set_header x-api-key "";');
  });
});
