// Types of render.mjs for the TypeScript tests.
export declare const INCLUDED_FILES: readonly string[];
export declare function renderTemplate(template: string, values: Record<string, string>): string;
export declare function writeNginxConfig(options: {
  dir: string;
  values: Record<string, string>;
  template?: string;
}): string;
export declare function apiKeyHeaderProblem(value: string): string | undefined;
export declare function placeholders(template: string): string[];
export declare function parseCli(
  args: readonly string[],
  template?: string,
  env?: Record<string, string | undefined>,
): { dir: string | undefined; values: Record<string, string>; problems: string[] };
