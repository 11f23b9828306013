// A worker's requests to the primary over node:cluster's IPC channel: each carries an id, and the
// primary's reply with the same id settles it; a primary that does not answer in time fails it.

/** Sends requests made by `request(id)`; each resolves with the reply `isReply` recognises by its id. */
export function primaryCalls<Reply extends { id: number }>(
  isReply: (message: unknown) => message is Reply,
  waitMs: number,
  silence: string,
): (request: (id: number) => object) => Promise<Reply> {
  const waiting = new Map<number, (reply: Reply) => void>();
  let nextId = 0;
  process.on("message", (message: unknown) => {
    if (isReply(message)) waiting.get(message.id)?.(message);
  });
  return (request) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error(silence));
      }, waitMs);
      waiting.set(id, (reply) => {
        clearTimeout(timer);
        waiting.delete(id);
        resolve(reply);
      });
      process.send?.(request(id));
    });
}
