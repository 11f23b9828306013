// Finds the server binaries the tests run for real (shared with the bench: local.mjs).
export { findBinary, requireBinaries } from "./local.mjs";
