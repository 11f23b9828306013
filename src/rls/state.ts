// The rate limit service's configuration in force: loaded once at start-up (an invalid one stops
// it), then reloaded on a change under RLS_CONFIG, on SIGHUP and with the policy's admin reload.
// A reload is atomic: a valid configuration replaces the old one whole, an invalid one changes
// nothing and says what is wrong, file, line and field.
import { type PathWatch, watchPath } from "../config/file-watch.js";
import { type RlsSource, readRlsSource, rlsConfigFrom } from "./load.js";
import type { RlsAlgorithm, RlsConfig } from "./model.js";
import { RlsConfigError } from "./model.js";

export type RlsReload =
  | { ok: true; changed: boolean; config: RlsConfig }
  | { ok: false; problems: string[]; config: RlsConfig };

export type RlsState = {
  current(): RlsConfig;
  /** Re-reads RLS_CONFIG, or takes the files another process read from it (WORKERS). */
  reload(source?: RlsSource): RlsReload;
  /** Reloads on every change of a file under the path (debounced), until `close`. */
  watch(onReload: (result: RlsReload) => void): void;
  close(): void;
};

export function createRlsState(options: {
  path: string;
  defaultAlgorithm: RlsAlgorithm;
  /** The files to start on, read elsewhere (WORKERS: a restarted worker gets the others'); else read here. */
  source?: RlsSource | undefined;
}): RlsState {
  const load = (source = readRlsSource(options.path)) =>
    rlsConfigFrom(options.path, source, { defaultAlgorithm: options.defaultAlgorithm });
  let config = load(options.source);
  let watcher: PathWatch | undefined;

  const reload = (source?: RlsSource): RlsReload => {
    try {
      const next = load(source);
      const changed = next.version !== config.version;
      if (changed) config = next;
      return { ok: true, changed, config };
    } catch (error) {
      if (error instanceof RlsConfigError) return { ok: false, problems: error.problems, config };
      return { ok: false, problems: [(error as Error).message], config };
    }
  };

  return {
    current: () => config,
    reload,
    watch(onReload) {
      watcher = watchPath(options.path, () => onReload(reload()));
    },
    close() {
      watcher?.close();
    },
  };
}
