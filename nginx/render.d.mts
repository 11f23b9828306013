// Types of render.mjs for the TypeScript tests.
export declare const INCLUDED_FILES: readonly string[];
export declare function renderTemplate(template: string, values: Record<string, string>): string;
export declare function writeNginxConfig(options: {
  dir: string;
  values: Record<string, string>;
  template?: string;
}): string;
