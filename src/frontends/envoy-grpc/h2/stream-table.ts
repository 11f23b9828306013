// A connection's open streams by id, in place of a Map. A Map that streams come and go through is
// rehashed every few streams, and V8 keeps each table it leaves (for iterators) with its entries in
// it: once such a table is in the old generation, every stream it still names, and the tables
// after it, survive the next scavenge and are promoted, then die in old space. Measured on the rate
// limit service with 16 streams a connection: nearly every stream promoted, scavenges of 2-5 ms.
// This table is one array, probed linearly from the id (client ids are odd and rise, so they fall
// in consecutive slots), emptied in place on delete (backward shift, no tombstones), and grown only
// when more streams are open at once than ever before, the old array cleared as it is left.
/** Enough for the usual client (a few dozen streams at once) without growing. */
const INITIAL_SLOTS = 64;

/** `S`: the stream type (state.ts), by its id; a parameter so that state.ts may name this table. */
export class StreamTable<S extends { readonly id: number }> {
  private slots: (S | undefined)[] = new Array<S | undefined>(INITIAL_SLOTS).fill(undefined);
  private mask = INITIAL_SLOTS - 1;
  size = 0;

  get(id: number): S | undefined {
    const { slots, mask } = this;
    for (let i = (id >>> 1) & mask; ; i = (i + 1) & mask) {
      const stream = slots[i];
      if (stream === undefined || stream.id === id) return stream;
    }
  }

  /** Adds a stream whose id is not in the table. */
  add(stream: S): void {
    // At most half full, so that a probe ends soon at an empty slot.
    if ((this.size + 1) * 2 > this.slots.length) this.grow();
    this.place(stream);
    this.size += 1;
  }

  delete(id: number): boolean {
    const { slots, mask } = this;
    let i = (id >>> 1) & mask;
    for (;;) {
      const stream = slots[i];
      if (stream === undefined) return false;
      if (stream.id === id) break;
      i = (i + 1) & mask;
    }
    // Backward shift: each later stream of the run moves into the hole when its home slot does
    // not lie (cyclically) between the hole and its own slot, so every probe still finds it.
    let hole = i;
    for (let j = (hole + 1) & mask; ; j = (j + 1) & mask) {
      const next = slots[j];
      if (next === undefined) break;
      const home = (next.id >>> 1) & mask;
      if ((j > hole && (home <= hole || home > j)) || (j < hole && home <= hole && home > j)) {
        slots[hole] = next;
        hole = j;
      }
    }
    slots[hole] = undefined;
    this.size -= 1;
    return true;
  }

  /** The open streams (a copy: the caller may close them meanwhile). */
  values(): S[] {
    const out: S[] = [];
    for (const stream of this.slots) if (stream !== undefined) out.push(stream);
    return out;
  }

  private place(stream: S): void {
    const { slots, mask } = this;
    let i = (stream.id >>> 1) & mask;
    while (slots[i] !== undefined) i = (i + 1) & mask;
    slots[i] = stream;
  }

  private grow(): void {
    const old = this.slots;
    this.slots = new Array<S | undefined>(old.length * 2).fill(undefined);
    this.mask = this.slots.length - 1;
    for (const stream of old) if (stream !== undefined) this.place(stream);
    old.fill(undefined);
  }
}
