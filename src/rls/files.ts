// The files of RLS_CONFIG: the one file it names, or the YAML files of a folder (its config/
// subfolder when it has one, as the reference's runtime directory), dot files skipped, in name order.
import { readdirSync, statSync } from "node:fs";
import { basename, extname, join, relative, sep } from "node:path";

const YAML_EXTENSIONS = new Set([".yaml", ".yml"]);
/** Folders nested deeper than this under RLS_CONFIG are not read (a guard against symlink loops). */
const MAX_FOLDER_DEPTH = 8;

export type FileRef = { name: string; full: string };

export function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException).code ?? String(error);
}

export function listFiles(path: string, problems: string[]): FileRef[] {
  let stats: ReturnType<typeof statSync>;
  try {
    stats = statSync(path);
  } catch (error) {
    problems.push(`${path}: cannot be read (${errorCode(error)})`);
    return [];
  }
  if (!stats.isDirectory()) return [{ name: basename(path), full: path }];
  const runtime = join(path, "config");
  const isRuntimeLayout = (() => {
    try {
      return statSync(runtime).isDirectory();
    } catch {
      return false;
    }
  })();
  const found: FileRef[] = [];
  walk(isRuntimeLayout ? runtime : path, 0);
  return found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  function walk(folder: string, depth: number): void {
    let names: string[];
    try {
      names = readdirSync(folder);
    } catch (error) {
      problems.push(`${relative(path, folder) || "."}: cannot be read (${errorCode(error)})`);
      return;
    }
    for (const name of names) {
      if (name.startsWith(".")) continue;
      const full = join(folder, name);
      let entry: ReturnType<typeof statSync>;
      try {
        entry = statSync(full);
      } catch {
        continue; // a dangling symlink
      }
      if (entry.isDirectory()) {
        if (depth < MAX_FOLDER_DEPTH) walk(full, depth + 1);
      } else if (YAML_EXTENSIONS.has(extname(name).toLowerCase())) {
        found.push({ name: relative(path, full).split(sep).join("/"), full });
      }
    }
  }
}
