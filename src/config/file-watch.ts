// Calls back once a settings file or folder has changed and settled: an editor's save, a copy, or
// Kubernetes updating a mounted ConfigMap, which never writes the files a path names but swaps the
// folder's `..data` symlink to a new timestamped folder (the names are links through `..data`).
import { type FSWatcher, statSync, watch } from "node:fs";
import { basename, dirname } from "node:path";

/** Editors and ConfigMap updates write in several steps: one call once they have settled. */
export const SETTLE_MS = 200;

export type PathWatch = { close(): void };

/**
 * A folder is watched whole, subfolders included. A file is watched through its folder, since a save
 * (rename over it) and a ConfigMap swap (of `..data`, beside it) both replace what a watch on the file
 * itself would follow; only its own name and the ConfigMap's `..`-names count, so that other files
 * written there (a log beside a policy) cost nothing.
 */
export function watchPath(path: string, onChange: () => void, settleMs = SETTLE_MS): PathWatch {
  const folder = statSync(path).isDirectory();
  const name = basename(path);
  const counts = (changed: string | null): boolean =>
    folder || changed === null || changed === name || changed.startsWith("..");
  let timer: NodeJS.Timeout | undefined;
  const watcher: FSWatcher = watch(
    folder ? path : dirname(path),
    { recursive: folder, persistent: false },
    (_event, changed) => {
      if (!counts(changed === null ? null : String(changed))) return;
      clearTimeout(timer);
      timer = setTimeout(onChange, settleMs);
      timer.unref();
    },
  );
  // The folder removed or unreadable: nothing more to watch; a reload still works by signal or admin call.
  watcher.on("error", () => undefined);
  return {
    close() {
      clearTimeout(timer);
      watcher.close();
    },
  };
}
