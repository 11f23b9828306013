// npm start: builds dist/ only when a source changed, then runs tollgate in this same process (one
// node start-up fewer than a separate prestart step).
import { ensureBuilt } from "./ensure-built.mjs";

ensureBuilt();
await import("../dist/src/main.js");
