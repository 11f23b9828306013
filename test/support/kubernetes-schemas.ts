// Kubernetes manifests checked offline against the API's schemas as the kubernetes-models packages
// ship them (the core API's OpenAPI, and the CRDs of the prometheus-operator and Istio): their
// JSON-schema validators (types, required fields, enums, formats), and their TypeScript types, whose
// excess-property check finds what those schemas let through as the API server's strict field
// validation would not: an unknown or misspelt field (`readOnlyRootFileSystem` silently dropped).
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as istioInstall from "@kubernetes-models/istio/install.istio.io/v1alpha1";
import * as istioNetworking from "@kubernetes-models/istio/networking.istio.io/v1alpha3";
import * as istioSecurity from "@kubernetes-models/istio/security.istio.io/v1";
import * as monitoring from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import * as apps from "kubernetes-models/apps/v1";
import * as autoscaling from "kubernetes-models/autoscaling/v2";
import * as networking from "kubernetes-models/networking.k8s.io/v1";
import * as policy from "kubernetes-models/policy/v1";
import * as core from "kubernetes-models/v1";
import ts from "typescript";

type Manifest = Record<string, unknown> & { apiVersion?: unknown; kind?: unknown };

/** The apiVersions the manifests use: their models, and the module whose types the type check imports. */
const MODELS: Record<string, { module: string; models: object }> = {
  v1: { module: "kubernetes-models/v1", models: core },
  "apps/v1": { module: "kubernetes-models/apps/v1", models: apps },
  "autoscaling/v2": { module: "kubernetes-models/autoscaling/v2", models: autoscaling },
  "networking.k8s.io/v1": { module: "kubernetes-models/networking.k8s.io/v1", models: networking },
  "policy/v1": { module: "kubernetes-models/policy/v1", models: policy },
  "monitoring.coreos.com/v1": {
    module: "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1",
    models: monitoring,
  },
  "install.istio.io/v1alpha1": {
    module: "@kubernetes-models/istio/install.istio.io/v1alpha1",
    models: istioInstall,
  },
  "networking.istio.io/v1alpha3": {
    module: "@kubernetes-models/istio/networking.istio.io/v1alpha3",
    models: istioNetworking,
  },
  "security.istio.io/v1": { module: "@kubernetes-models/istio/security.istio.io/v1", models: istioSecurity },
};

/** Kinds whose model leaves `spec` out (Istio's operator schema is open): validated, but not typed. */
const UNTYPED = new Set(["install.istio.io/v1alpha1 IstioOperator"]);

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

const modelsOf = (manifest: Manifest) => MODELS[String(manifest.apiVersion)];

const label = (m: Manifest) => `${String(m.apiVersion)} ${String(m.kind)}`;

/** What the model's JSON-schema validator says of one manifest; a kind without a model is a problem too. */
export function schemaProblems(manifest: Manifest): string[] {
  const models = modelsOf(manifest)?.models as Record<string, unknown> | undefined;
  const Model = models?.[String(manifest.kind)] as (new (data: unknown) => { validate(): void }) | undefined;
  if (Model === undefined) return [`no schema for ${label(manifest)}`];
  try {
    new Model(manifest).validate();
    return [];
  } catch (error) {
    return [(error as Error).message];
  }
}

/**
 * Each manifest as an object literal of its model's type, compiled by TypeScript: every field the type
 * does not have, and every value of the wrong type, comes back as `<name>: <message>`.
 */
export function typeProblems(manifests: readonly { name: string; manifest: Manifest }[]): string[] {
  const file = join(ROOT, "test", "kubernetes-manifests.generated.ts");
  const names: string[] = [];
  const lines: string[] = [];
  for (const [i, { name, manifest }] of manifests.entries()) {
    const path = modelsOf(manifest)?.module;
    if (path === undefined || UNTYPED.has(label(manifest))) continue;
    lines.push(`import type { I${String(manifest.kind)} as T${i} } from "${path}";`);
    lines.push(`export const m${i}: T${i} = ${JSON.stringify(manifest)};`);
    names.push(name, name);
  }
  const source = lines.join("\n");
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile;
  host.getSourceFile = (name, language, ...rest) =>
    name === file
      ? ts.createSourceFile(name, source, language)
      : getSourceFile.call(host, name, language, ...rest);
  const fileExists = host.fileExists;
  host.fileExists = (name) => name === file || fileExists.call(host, name);
  const program = ts.createProgram([file], options, host);
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file?.fileName === file)
    .map((d) => {
      const line = d.file?.getLineAndCharacterOfPosition(d.start ?? 0).line ?? 0;
      return `${names[line] ?? "?"}: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`;
    });
}
