// The check path's compiled code, kept through quiet periods. By default V8 drops the bytecode of
// functions that have not run for a while (bytecode flushing, during the collections an idle
// process still makes), so the first seconds of traffic after a quiet minute run through the
// parser and the interpreter again. Measured (h2load --h1, 64 connections, cached denials,
// 2026-12-05): 25.2–25.6 µs of CPU per request in 3 s slices without a pause, 28.7–30.3 in the
// 3 s right after 60 s of idle, 23.8–25.6 after the same idle with this set at start. The cost is
// memory: the bytecode of what ran once (start-up) stays (how much was not measured).
import { setFlagsFromString } from "node:v8";

export function keepCompiledCode(): void {
  // Read by V8 at each collection, so setting it at run time holds from the next one on.
  setFlagsFromString("--no-flush-bytecode");
}
