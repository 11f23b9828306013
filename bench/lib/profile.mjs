// Reads a V8 .cpuprofile (node --cpu-prof) and ranks functions and packages by self time.
import { readFileSync } from "node:fs";

/** Where a script lives, for grouping: a package under node_modules, node's own code, or the project. */
function origin(url) {
  if (url === "") return "(native / V8)";
  if (url.startsWith("node:")) return "node core";
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg !== null) return pkg[1];
  const project = /\/dist\/(.*)$/.exec(url);
  if (project !== null) return `tollgate ${project[1].split("/").slice(0, 2).join("/")}`;
  return url;
}

function shortUrl(url) {
  if (url.startsWith("node:")) return url;
  const pkg = /node_modules\/(.*)$/.exec(url);
  if (pkg !== null) return pkg[1];
  const project = /\/(dist\/.*)$/.exec(url);
  return project !== null ? project[1] : url;
}

/**
 * Self time per function and per origin, in ms and as a share of the busy samples (idle excluded).
 * `window` ({fromUs, toUs}, from process.hrtime) keeps only the samples taken while the load ran: V8
 * stamps samples with the same monotonic clock, so start-up and shutdown stay out of the figures.
 */
export function summarizeProfile(file, { top = 25, window } = {}) {
  const profile = JSON.parse(readFileSync(file, "utf8"));
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfUs = new Map();
  // timeDeltas[i] is the time since the previous sample; it is the cost of sample i.
  let at = profile.startTime;
  let kept = 0;
  for (let i = 0; i < profile.samples.length; i += 1) {
    const delta = profile.timeDeltas[i] ?? 0;
    at += delta;
    if (window !== undefined && (at < window.fromUs || at > window.toUs)) continue;
    kept += 1;
    const id = profile.samples[i];
    selfUs.set(id, (selfUs.get(id) ?? 0) + delta);
  }
  if (window !== undefined && kept === 0) {
    throw new Error(
      `no profile samples fall in the load window (profile ${profile.startTime}..${at} µs, load ${window.fromUs}..${window.toUs} µs)`,
    );
  }
  const byFunction = new Map();
  const byOrigin = new Map();
  let busyUs = 0;
  let idleUs = 0;
  for (const [id, us] of selfUs) {
    const frame = nodes.get(id).callFrame;
    const name = frame.functionName || "(anonymous)";
    if (name === "(idle)") {
      idleUs += us;
      continue;
    }
    busyUs += us;
    const where = frame.url === "" ? "" : `${shortUrl(frame.url)}:${frame.lineNumber + 1}`;
    const key = `${name} ${where}`.trim();
    byFunction.set(key, (byFunction.get(key) ?? 0) + us);
    const group = name.startsWith("(") ? name : origin(frame.url);
    byOrigin.set(group, (byOrigin.get(group) ?? 0) + us);
  }
  const rank = (map, n) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([name, us]) => ({ name, ms: us / 1000, share: us / busyUs }));
  return {
    samples: kept,
    busyMs: busyUs / 1000,
    idleMs: idleUs / 1000,
    functions: rank(byFunction, top),
    origins: rank(byOrigin, 15),
  };
}
