// Which check front end answers a request target on the check listener.
import { describe, expect, it } from "vitest";
import { envoyHttp } from "../../src/frontends/envoy-http.js";
import type { HttpCheckFrontEnd } from "../../src/frontends/http-check.js";
import { matchesPath } from "../../src/frontends/http-check.js";
import { nginx } from "../../src/frontends/nginx.js";

const answering = (url: string): string | undefined =>
  [envoyHttp, nginx].find((frontEnd: HttpCheckFrontEnd) => frontEnd.paths.some((p) => matchesPath(url, p)))
    ?.protocol;

describe("the check listener's table of request targets", () => {
  it("sends /ext_authz, any path below it and its query to Envoy's front end", () => {
    for (const url of ["/ext_authz", "/ext_authz/", "/ext_authz/api/products?q=1", "/ext_authz?x=1"]) {
      expect(answering(url), url).toBe("envoy");
    }
  });

  it("sends /nginx/auth, with or without a query, to nginx's front end", () => {
    expect(answering("/nginx/auth")).toBe("nginx");
    expect(answering("/nginx/auth?x=1")).toBe("nginx");
  });

  it("answers no target that only begins like one of them", () => {
    for (const url of [
      "/ext_authzx",
      "/ext_auth",
      "/nginx/auth/x",
      "/nginx/authx",
      "/nginx",
      "/",
      "/health",
    ]) {
      expect(answering(url), url).toBeUndefined();
    }
  });
});
