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
type Rules = Record<string, Record<string, unknown> | undefined>;
/** A field's PGV rules, `(validate.rules)`, as protobufjs parsed them: `{ uint32: { lte: 10 } }`. */
const rulesOf = (field: protobuf.Field): Rules =>
  Object.assign(
    {},
    ...(field.parsedOptions ?? []).map((o: Record<string, unknown>) => o["(validate.rules)"]),
  );
/** Seconds of a duration as YAML writes it ("0.25s") or as a rule bound ({ seconds, nanos }). */
const secondsOf = (d: unknown): number =>
  typeof d === "string"
    ? Number(d.slice(0, -1))
    : Number((d as { seconds?: number }).seconds ?? 0) + Number((d as { nanos?: number }).nanos ?? 0) / 1e9;
/** A scalar field's default, which PGV holds to the field's rules when the field is left out. */
const defaultOf = (field: protobuf.Field): Json =>
  field.resolvedType !== null
    ? undefined
    : field.type === "bool"
      ? false
      : /^(string|bytes)$/.test(field.type)
        ? ""
        : 0;

/** What breaks a PGV rule of one value: bounds, a string's set of values and length. */
function valueRuleProblems(rules: Rules, v: Json, at: string): string[] {
  const problems: string[] = [];
  for (const [kind, rule] of Object.entries(rules)) {
    if (rule === undefined || kind === "repeated" || kind === "message" || kind === "map") continue;
    if (rule.ignore_empty === true && (v === "" || v === 0)) continue;
    const n = kind === "duration" ? secondsOf(v) : Number(v);
    const bound = (b: unknown) => (kind === "duration" ? secondsOf(b) : Number(b));
    const shown = (b: unknown) => `${bound(b)}${kind === "duration" ? "s" : ""}`;
    const broken = Number.isNaN(n)
      ? [] // a value of the wrong type, told already
      : [
          rule.gt !== undefined && !(n > bound(rule.gt)) && `> ${shown(rule.gt)}`,
          rule.gte !== undefined && !(n >= bound(rule.gte)) && `>= ${shown(rule.gte)}`,
          rule.lt !== undefined && !(n < bound(rule.lt)) && `< ${shown(rule.lt)}`,
          rule.lte !== undefined && !(n <= bound(rule.lte)) && `<= ${shown(rule.lte)}`,
        ];
    for (const what of broken) if (what) problems.push(`${at}: must be ${what}`);
    if (kind !== "string" || typeof v !== "string") continue;
    if (Array.isArray(rule.in) && !rule.in.includes(v))
      problems.push(`${at}: ${JSON.stringify(v)} is not one of ${rule.in.join(", ")}`);
    if (Number(rule.min_len ?? 0) > v.length) problems.push(`${at}: shorter than ${String(rule.min_len)}`);
    if (rule.max_len !== undefined && Number(rule.max_len) < v.length)
      problems.push(`${at}: longer than ${String(rule.max_len)}`);
  }
  return problems;
}

/**
 * What Envoy would refuse in `value` read as the message `typeName`, as its config loader reads YAML
 * (proto3 JSON, field names in snake_case or lowerCamelCase, unknown fields refused): each problem as
 * "path: what". Besides names and types: a oneof set twice, a required field or oneof left out, a
 * value outside its PGV rules (bounds, a string's allowed values and length, a list's minimum), a
 * field Envoy deprecated. `partial` is for a patch
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
        else {
          const repeated = rulesOf(field).repeated ?? {};
          if (Number(repeated.min_items ?? 0) > item.length)
            problems.push(`${at2}: fewer than ${String(repeated.min_items)} items`);
          for (const [i, entry] of item.entries()) {
            fieldValue(field, entry, `${at2}[${i}]`);
            problems.push(...valueRuleProblems((repeated.items ?? {}) as Rules, entry, `${at2}[${i}]`));
          }
        }
      } else {
        fieldValue(field, item, at2);
        problems.push(...valueRuleProblems(rulesOf(field), item, at2));
      }
    }
    if (options.partial) return;
    for (const f of type.fieldsArray) {
      if (f.partOf !== null || present.has(f) || f.repeated) continue;
      const rules = rulesOf(f);
      const required = Object.values(rules).some((rule) => rule?.required === true);
      const scalar = defaultOf(f);
      if (required || (scalar !== undefined && valueRuleProblems(rules, scalar, "").length > 0))
        problems.push(`${at}: ${f.name} is required in ${type.fullName.slice(1)}`);
    }
    for (const o of type.oneofsArray)
      if (o.options?.["(validate.required)"] === true && !oneofs.has(o.name))
        problems.push(`${at}: one of ${o.oneof.join(", ")} is required in ${type.fullName.slice(1)}`);
  }

  message(root.lookupType(typeName), value, "");
  return problems;
}
