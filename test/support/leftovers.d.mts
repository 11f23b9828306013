// Types of leftovers.mjs for the TypeScript tests.
import type { ChildProcess } from "node:child_process";

export declare function stopOnExit<T extends ChildProcess>(child: T, signal?: NodeJS.Signals): T;
export declare function removeOnExit(folder: string): string;
export declare function forget(folder: string): void;
