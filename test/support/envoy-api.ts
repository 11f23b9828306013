// Envoy's v3 API, from the .proto files @grpc/grpc-js-xds ships, and a strict check of a YAML config against it.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import protobuf from "protobufjs";

const require = createRequire(import.meta.url);
const XDS = join(dirname(require.resolve("@grpc/grpc-js-xds/package.json")), "deps");
/** Where an import is found: Envoy's API, its xds, validate and googleapis deps, then protobufjs's own. */
const DIRS = [
  join(XDS, "envoy-api"),
  join(XDS, "xds"),
  join(XDS, "protoc-gen-validate"),
  join(XDS, "googleapis"),
  dirname(require.resolve("protobufjs/package.json")),
];

/** A Root that reads Envoy's API files (and the ones they import) from the package. */
export function envoyApiRoot(files: string[]): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => DIRS.map((d) => join(d, target)).find(existsSync) ?? target;
  root.loadSync(files, { keepCase: true });
  root.resolveAll();
  return root;
}

/** The messages tollgate's Envoy configs use: the bootstrap and every extension they name by @type. */
const CONFIG_FILES = [
  "envoy/config/bootstrap/v3/bootstrap.proto",
  "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto",
  "envoy/extensions/filters/http/ext_authz/v3/ext_authz.proto",
  "envoy/extensions/filters/http/ratelimit/v3/rate_limit.proto",
  "envoy/extensions/filters/http/header_mutation/v3/header_mutation.proto",
  "envoy/extensions/filters/http/router/v3/router.proto",
  "envoy/extensions/access_loggers/stream/v3/stream.proto",
  "envoy/extensions/upstreams/http/v3/http_protocol_options.proto",
];
let configRoot: protobuf.Root | undefined;

type Json = unknown;
const INTEGERS = /^(u?int|sint|s?fixed)(32|64)$/;
const camel = (name: string) => name.replace(/_([a-z0-9])/g, (_all, c: string) => c.toUpperCase());
const isObject = (v: Json): v is Record<string, Json> =>
  typeof v === "object" && v !== null && !Array.isArray(v);
/** A PGV rule that makes a field required (message.required, duration.required). */
const requiredRule = (field: protobuf.Field) =>
  Object.entries(field.options ?? {}).some(
    ([key, value]) => /^\(validate\.rules\)\.\w+\.required$/.test(key) && value === true,
  );

/**
 * What Envoy would refuse in `value` read as the message `typeName`, as its config loader reads YAML
 * (proto3 JSON, field names in snake_case or lowerCamelCase, unknown fields refused): each problem as
 * "path: what". Besides names and types: a oneof set twice, a required field or oneof (PGV's
 * `required`, a string's `min_len`) left out, a field Envoy deprecated. `partial` is for a patch
 * merged into a message (an Istio EnvoyFilter's MERGE): a field left out is no problem there.
 */
export function envoyConfigProblems(typeName: string, value: Json, options: { partial?: boolean } = {}) {
  configRoot ??= envoyApiRoot(CONFIG_FILES);
  const root = configRoot;
  const problems: string[] = [];

  const scalar = (type: string, v: Json, at: string) => {
    const ok = INTEGERS.test(type)
      ? (Number.isInteger(v) || (typeof v === "string" && /^-?\d+$/.test(v))) &&
        !(type.startsWith("u") && Number(v) < 0)
      : type === "double" || type === "float"
        ? typeof v === "number"
        : type === "bool"
          ? typeof v === "boolean"
          : typeof v === "string";
    if (!ok) problems.push(`${at}: a ${type} expected, not ${JSON.stringify(v)}`);
  };

  const wellKnown = (name: string, v: Json, at: string): void => {
    if (name === "google.protobuf.Duration") {
      if (typeof v !== "string" || !/^\d+(\.\d{1,9})?s$/.test(v))
        problems.push(`${at}: a duration such as "0.25s" expected, not ${JSON.stringify(v)}`);
    } else if (name === "google.protobuf.Struct") {
      if (!isObject(v)) problems.push(`${at}: an object expected`);
    } else if (name === "google.protobuf.Any") {
      const url = isObject(v) ? v["@type"] : undefined;
      const typeName = /^type\.googleapis\.com\/([\w.]+)$/.exec(String(url))?.[1];
      const type = typeName === undefined ? null : root.lookup(typeName);
      if (!(type instanceof protobuf.Type) || !isObject(v))
        return void problems.push(`${at}: "@type" ${JSON.stringify(url)} names no message of the API`);
      const { "@type": _url, ...fields } = v;
      message(type, fields, `${at}<${type.name}>`);
    } else if (name !== "google.protobuf.Value" && name !== "google.protobuf.ListValue") {
      // The wrappers (UInt32Value…) are written as their bare value.
      const inner = name.replace(/^google\.protobuf\.(\w+)Value$/, "$1").toLowerCase();
      scalar(inner, v, at);
    }
  };

  const fieldValue = (field: protobuf.Field, v: Json, at: string) => {
    const type = field.resolvedType;
    if (type instanceof protobuf.Enum) {
      const known =
        typeof v === "string" ? v in type.values : Object.values(type.values).includes(v as number);
      if (!known) problems.push(`${at}: ${JSON.stringify(v)} is no value of ${type.fullName.slice(1)}`);
    } else if (type instanceof protobuf.Type) {
      const name = type.fullName.slice(1);
      if (name.startsWith("google.protobuf.")) wellKnown(name, v, at);
      else message(type, v, at);
    } else scalar(field.type, v, at);
  };

  function message(type: protobuf.Type, v: Json, at: string): void {
    if (!isObject(v)) return void problems.push(`${at}: an object (${type.name}) expected`);
    const byName = new Map<string, protobuf.Field>();
    for (const f of type.fieldsArray) byName.set(f.name, f).set(camel(f.name), f);
    const oneofs = new Map<string, string>();
    const present = new Set<protobuf.Field>();
    for (const [key, item] of Object.entries(v)) {
      const at2 = `${at}.${key}`;
      const field = byName.get(key);
      if (field === undefined) {
        problems.push(`${at2}: no such field in ${type.fullName.slice(1)}`);
        continue;
      }
      present.add(field);
      if (field.options?.deprecated === true) problems.push(`${at2}: deprecated in Envoy's API`);
      if (field.partOf !== null) {
        const first = oneofs.get(field.partOf.name);
        if (first !== undefined)
          problems.push(`${at2}: oneof ${field.partOf.name} is already set by ${first}`);
        oneofs.set(field.partOf.name, key);
      }
      if (field instanceof protobuf.MapField) {
        if (!isObject(item)) problems.push(`${at2}: a map expected`);
        else for (const [k, entry] of Object.entries(item)) fieldValue(field, entry, `${at2}[${k}]`);
      } else if (field.repeated) {
        if (!Array.isArray(item)) problems.push(`${at2}: a list expected`);
        else for (const [i, entry] of item.entries()) fieldValue(field, entry, `${at2}[${i}]`);
      } else fieldValue(field, item, at2);
    }
    if (options.partial) return;
    for (const f of type.fieldsArray) {
      const minLen = f.options?.["(validate.rules).string.min_len"];
      if (f.partOf === null && !present.has(f) && (requiredRule(f) || (minLen ?? 0) > 0))
        problems.push(`${at}: ${f.name} is required in ${type.fullName.slice(1)}`);
    }
    for (const o of type.oneofsArray)
      if (o.options?.["(validate.required)"] === true && !oneofs.has(o.name))
        problems.push(`${at}: one of ${o.oneof.join(", ")} is required in ${type.fullName.slice(1)}`);
  }

  message(root.lookupType(typeName), value, "");
  return problems;
}
