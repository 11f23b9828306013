// Under `npm start`, npm is tollgate's parent and leads the shell's job (or the unit's main process).
// A signal to the whole job reaches npm too, and npm, which forwards SIGINT and SIGTERM only, dies
// of the others: SIGHUP above all (`kill -HUP %1`, a closed terminal). tollgate would then run on
// without it, out of the shell's jobs, holding the ports. So once the npm that started it is gone,
// tollgate stops, as a SIGINT stops it, saying why and how to reload without a signal to the job.
import type { Logger } from "./logger.js";

/** How often the parent is looked at: a stop this much after npm's death is soon enough. */
const WATCH_MS = 250;

/** Stops this process (SIGINT to itself) once its parent, the npm of `npm start`, is gone. */
export function stopWithNpm(logger: Logger): void {
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    logger.warn(
      { event: "parent_gone", parentPid: parent },
      `npm, which ran this tollgate (npm start), is gone: a signal to the whole npm start job, SIGHUP included, stops npm. Stopping too, rather than run on without it. To reload the policy, POST /admin/policy/reload, or kill -HUP ${process.pid} (this tollgate itself)`,
    );
    process.kill(process.pid, "SIGINT");
  }, WATCH_MS);
  timer.unref();
}
