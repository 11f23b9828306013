// A request whose path is served but not for its method: 405 with Allow, or OPTIONS answered with Allow.
import type { RequestHandler, Router } from "express";
import { HttpError, shown } from "./errors.js";

/**
 * The methods a path is served for, as Allow lists them: HEAD wherever GET is (node:http and express
 * answer it from the GET handler, without a body), and OPTIONS, which every served path answers.
 * Sorted, so that one path always gets one header.
 */
export function allowHeader(methods: Iterable<string>): string {
  const allowed = new Set(methods);
  if (allowed.has("GET")) allowed.add("HEAD");
  allowed.add("OPTIONS");
  return [...allowed].sort().join(", ");
}

/** The longest part of a client's path that an error message repeats. */
const SHOWN_PATH = 200;

/**
 * The answer to `method` on a path served for `allowed` (which does not hold it): OPTIONS gets 204
 * with Allow and no body; any other method 405 with Allow and tollgate's JSON error.
 */
export function wrongMethod(
  method: string,
  path: string,
  allowed: Iterable<string>,
): { status: 204 | 405; allow: string; body: { error: "method_not_allowed"; message: string } | undefined } {
  const allow = allowHeader(allowed);
  if (method === "OPTIONS") return { status: 204, allow, body: undefined };
  return {
    status: 405,
    allow,
    body: {
      error: "method_not_allowed",
      message: `${method} is not allowed on ${shown(path, SHOWN_PATH)} (Allow: ${allow})`,
    },
  };
}

/** What the walk below reads of express's router: its layers, each a route, a router or middleware. */
type Layer = {
  route?: { methods: Record<string, boolean | undefined> };
  handle: unknown;
  match(path: string): false | { path: string };
};
const layersOf = (router: unknown): readonly Layer[] =>
  ((router as { stack?: Layer[] }).stack ?? []) as readonly Layer[];

/** Every method some route of `router` (or of a router mounted in it) serves at `path`. */
function methodsAt(router: unknown, path: string, into: Set<string>): Set<string> {
  for (const layer of layersOf(router)) {
    let matched: false | { path: string };
    try {
      matched = layer.match(path);
    } catch {
      // A malformed escape in a parameter: the router refused it already when it met this layer.
      continue;
    }
    if (matched === false) continue;
    if (layer.route !== undefined) {
      for (const [method, on] of Object.entries(layer.route.methods)) {
        if (on === true && method !== "_all") into.add(method.toUpperCase());
      }
    } else if (layersOf(layer.handle).length > 0) {
      methodsAt(layer.handle, path.slice(matched.path.length) || "/", into);
    }
  }
  return into;
}

/**
 * The last handler of a router: what reaches it matched no route. A path some route serves for
 * other methods gets 405 with Allow (or 204 with Allow for OPTIONS, before express's own text/plain
 * answer); any other path 404, as before. In one place for every route of the router, so that a
 * route added later is covered without a word.
 */
export function unmatched(router: Router): RequestHandler {
  return (req, res) => {
    const allowed = methodsAt(router, req.path, new Set());
    const where = `${req.baseUrl}${req.path}`;
    if (allowed.size === 0) {
      throw new HttpError("not_found", `No route for ${req.method} ${shown(where, SHOWN_PATH)}`);
    }
    const answer = wrongMethod(req.method, where, allowed);
    if (answer.body === undefined) {
      res.status(answer.status).set("Allow", answer.allow).end();
      return;
    }
    throw new HttpError("method_not_allowed", answer.body.message, { Allow: answer.allow });
  };
}
