// The deadlines of the gRPC calls that state one (grpc-timeout): a binary heap ordered by deadline
// with one timer, set for the earliest, instead of a timer per call (Envoy's ext_authz and rate
// limit calls state different timeouts on one listener, so arrival order is not deadline order).
// A call leaves the heap when it is answered; a call without grpc-timeout never enters it.
import { grpcTimeoutMs } from "./grpc-protocol.js";

/** A call in the heap: its deadline on performance.now()'s clock, and its index there (-1 when out). */
export type Timed = { deadline: number; slot: number };

/** setTimeout's longest delay: a deadline further away is waited for in steps. */
const MAX_DELAY_MS = 2 ** 31 - 1;

export type Deadlines<T extends Timed> = {
  /**
   * In the heap, due `timeout` (a grpc-timeout value) from now. Without one, or with a malformed one,
   * nothing: a malformed value is ignored, as gRPC's C core ignores it (grpc-go and grpc-js fail the
   * call INTERNAL); the call stays bounded by tollgate's own deadlines.
   */
  add(item: T, timeout: string | undefined): void;
  /** Out of the heap (answered, or gone); nothing when it is not in. */
  remove(item: T): void;
};

/** `expire` is called once per item whose deadline passes while it is in the heap (it is out by then). */
export function createDeadlines<T extends Timed>(expire: (item: T) => void): Deadlines<T> {
  const heap: T[] = [];
  let timer: NodeJS.Timeout | undefined;
  let armedFor = Number.POSITIVE_INFINITY;

  const place = (item: T, at: number): void => {
    heap[at] = item;
    item.slot = at;
  };
  const up = (from: number): void => {
    const item = heap[from] as T;
    let at = from;
    while (at > 0) {
      const parent = (at - 1) >> 1;
      const above = heap[parent] as T;
      if (above.deadline <= item.deadline) break;
      place(above, at);
      at = parent;
    }
    place(item, at);
  };
  const down = (from: number): void => {
    const item = heap[from] as T;
    let at = from;
    for (;;) {
      const left = 2 * at + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child =
        right < heap.length && (heap[right] as T).deadline < (heap[left] as T).deadline ? right : left;
      if ((heap[child] as T).deadline >= item.deadline) break;
      place(heap[child] as T, at);
      at = child;
    }
    place(item, at);
  };
  const removeAt = (at: number): T => {
    const item = heap[at] as T;
    const last = heap.pop() as T;
    item.slot = -1;
    if (last !== item) {
      place(last, at);
      if (at > 0 && (heap[(at - 1) >> 1] as T).deadline > last.deadline) up(at);
      else down(at);
    }
    return item;
  };

  const arm = (): void => {
    const first = heap[0];
    if (first === undefined || (timer !== undefined && armedFor <= first.deadline)) return;
    clearTimeout(timer);
    armedFor = first.deadline;
    timer = setTimeout(fire, Math.min(MAX_DELAY_MS, Math.max(0, first.deadline - performance.now())));
    timer.unref();
  };
  // As the store's deadlines (store/failure.ts): one setImmediate of grace, so that an answer whose
  // store reply already sits in the socket (the loop was busy, not the store) is written first.
  const fire = (): void => {
    timer = undefined;
    armedFor = Number.POSITIVE_INFINITY;
    setImmediate(due);
  };
  const due = (): void => {
    const now = performance.now();
    while (heap.length > 0 && (heap[0] as T).deadline <= now) expire(removeAt(0));
    arm();
  };

  return {
    add(item, timeout) {
      const ms = timeout === undefined ? undefined : grpcTimeoutMs(timeout);
      if (ms === undefined) return;
      item.deadline = performance.now() + ms;
      heap.push(item);
      up(heap.length - 1);
      if (item.slot === 0) arm();
    },
    remove(item) {
      if (item.slot >= 0 && heap[item.slot] === item) removeAt(item.slot);
    },
  };
}
