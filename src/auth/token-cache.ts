// Answers kept by a token's whole text, bounded by their count and by the tokens' total length: a
// provider's tokens may be 16,000 characters each, and ten thousand of them must not hold 160 MB. The oldest
// entry goes first when either bound is reached.
export type TokenCache<V> = {
  get(token: string): V | undefined;
  set(token: string, value: V): void;
  delete(token: string): void;
  clear(): void;
  readonly size: number;
};

export function createTokenCache<V>(options: { maxEntries: number; maxChars: number }): TokenCache<V> {
  const entries = new Map<string, V>();
  let chars = 0;
  const remove = (token: string) => {
    if (entries.delete(token)) chars -= token.length;
  };
  return {
    get: (token) => entries.get(token),
    set(token, value) {
      remove(token);
      if (token.length > options.maxChars) return;
      while (entries.size >= options.maxEntries || chars + token.length > options.maxChars) {
        remove(entries.keys().next().value as string);
      }
      entries.set(token, value);
      chars += token.length;
    },
    delete: remove,
    clear() {
      entries.clear();
      chars = 0;
    },
    get size() {
      return entries.size;
    },
  };
}
