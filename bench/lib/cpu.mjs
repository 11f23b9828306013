// Where the CPU went during a row (Linux /proc): the bench's own process tree, by process, and everything
// else on the machine, so that a run disturbed by other work says so next to its figures.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { connect, createServer } from "node:net";

const read = (path) => {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
};

let ticksPerSecond;
function clockTicks() {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/**
 * utime + stime in clock ticks, and the parent, of one process; undefined once it is gone. `reaped`:
 * cutime + cstime, the CPU of its children that have exited and been waited for.
 */
function processStat(pid) {
  const text = read(`/proc/${pid}/stat`);
  if (text === undefined) return undefined;
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return {
    ppid: Number(fields[1]),
    ticks: Number(fields[11]) + Number(fields[12]),
    reaped: Number(fields[13]) + Number(fields[14]),
  };
}

/** The CPU seconds (user + system) one live process has used so far. */
export function cpuSecondsOf(pid) {
  const stat = processStat(pid);
  if (stat === undefined) throw new Error(`process ${pid} is gone`);
  return stat.ticks / clockTicks();
}

/**
 * The bench's children that start and end within a slice (h2load, the gRPC rows' load generator; the
 * RLS floor's client) are not in the tree taken at its start: their CPU is counted from the bench's
 * cutime + cstime.
 */
export const REAPED = "bench's exited children (h2load, RLS floor client)";

/** The bench and every process below it (nginx workers included), each with its parent. */
function processTree(rootPid) {
  const children = new Map();
  const parents = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const stat = processStat(name);
    if (stat === undefined) continue;
    parents.set(Number(name), stat.ppid);
    const list = children.get(stat.ppid) ?? [];
    list.push(Number(name));
    children.set(stat.ppid, list);
  }
  const tree = [rootPid];
  for (let i = 0; i < tree.length; i += 1) tree.push(...(children.get(tree[i]) ?? []));
  return { pids: tree, parents };
}

function machineTicks() {
  const fields = (read("/proc/stat") ?? "").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal …: idle and iowait are the time nobody used.
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  return { total, busy: total - idle, steal: fields[7] ?? 0 };
}

/**
 * Starts counting; `stop()` returns clock ticks: of the whole machine (all cores), busy, steal, the
 * bench's tree, and by process name. Ticks of several slices add up; see cpuFigures.
 * `names` maps pids to labels.
 */
export function cpuUsage(names) {
  if (read("/proc/stat") === undefined) return { stop: () => undefined };
  const { pids, parents } = processTree(process.pid);
  // An nginx worker is counted under its master's name.
  const label = (pid) => {
    if (pid === process.pid) return "bench (autocannon)";
    return names.get(pid) ?? names.get(parents.get(pid)) ?? (read(`/proc/${pid}/comm`) ?? "?").trim();
  };
  const start = new Map(pids.map((pid) => [pid, processStat(pid)?.ticks]));
  const reapedStart = processStat(process.pid)?.reaped ?? 0;
  const machineStart = machineTicks();
  return {
    stop() {
      const machineEnd = machineTicks();
      const byProcess = {};
      const reaped = (processStat(process.pid)?.reaped ?? 0) - reapedStart;
      if (reaped > 0) byProcess[REAPED] = reaped;
      let ours = reaped;
      for (const [pid, before] of start) {
        const after = processStat(pid)?.ticks;
        if (before === undefined || after === undefined) continue;
        const name = label(pid);
        byProcess[name] = (byProcess[name] ?? 0) + (after - before);
        ours += after - before;
      }
      return {
        total: machineEnd.total - machineStart.total,
        busy: machineEnd.busy - machineStart.busy,
        steal: machineEnd.steal - machineStart.steal,
        ours,
        byProcess,
      };
    },
  };
}

/**
 * Shares of the whole machine (all cores = 100%): busy, the bench's tree, other processes, steal and
 * each process; and CPU seconds by process, which hardly depend on how busy the machine was.
 */
export function cpuFigures(tickLists) {
  const ticks = tickLists.filter((t) => t !== undefined);
  const total = ticks.reduce((n, t) => n + t.total, 0);
  if (ticks.length === 0 || total <= 0) return undefined;
  const sum = (field) => ticks.reduce((n, t) => n + t[field], 0);
  const byProcess = {};
  const secondsByProcess = {};
  for (const t of ticks) {
    for (const [name, n] of Object.entries(t.byProcess)) {
      byProcess[name] = (byProcess[name] ?? 0) + n / total;
      secondsByProcess[name] = (secondsByProcess[name] ?? 0) + n / clockTicks();
    }
  }
  const busy = sum("busy") / total;
  const ours = sum("ours") / total;
  return {
    busy,
    ours,
    others: Math.max(0, busy - ours),
    steal: sum("steal") / total,
    byProcess,
    secondsByProcess,
  };
}

/** One loopback TCP connection inside this process: `rounds` 64-byte ping-pongs, in ms. */
function pingPong(rounds) {
  return new Promise((resolve, reject) => {
    const server = createServer((socket) => socket.on("data", (data) => socket.write(data)));
    server.listen(0, "127.0.0.1", () => {
      const client = connect(server.address().port, "127.0.0.1");
      const payload = Buffer.alloc(64, 120);
      let left = rounds;
      let started;
      client.on("connect", () => {
        started = process.hrtime.bigint();
        client.write(payload);
      });
      client.on("data", () => {
        left -= 1;
        if (left > 0) {
          client.write(payload);
          return;
        }
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        client.destroy();
        server.close(() => resolve(ms));
      });
      client.on("error", reject);
    });
  });
}

/**
 * The machine's current speed at what the bench stresses (syscalls, the loopback TCP stack, wake-ups):
 * the best of three runs of 2,000 loopback ping-pongs, in ms, taken while no load runs. On a shared VM
 * it drifts between and within runs, and the report shows by how much.
 */
export async function speedProbe() {
  let best = Number.POSITIVE_INFINITY;
  for (let run = 0; run < 3; run += 1) best = Math.min(best, await pingPong(2_000));
  return best;
}
