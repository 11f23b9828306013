// Announcements of freed subjects: every change that was tried is announced, also one that failed,
// since a change can fail after it was made (a key deleted, then the step after it lost).
import { describe, expect, it } from "vitest";
import type { ApiKeyStore, SubjectStore } from "../../src/auth/subjects.js";
import type { SessionStore, UserStore } from "../../src/auth/types.js";
import type { LimiterPort } from "../../src/ratelimit/limiter.js";
import {
  announcingApiKeys,
  announcingLimiter,
  announcingSessions,
  announcingSubjects,
  announcingUsers,
  createLocalInvalidations,
} from "../../src/store/invalidations.js";

const failed = async (): Promise<never> => {
  throw new Error("the store failed after the change was made");
};

/** A port whose every method fails: only what the announcing wrapper does on top is left to see. */
const failing = <T>(): T => new Proxy({}, { get: () => failed }) as T;

describe("announcements", () => {
  const bus = createLocalInvalidations();
  const heard: string[] = [];
  bus.subscribe({ message: (subject) => heard.push(subject), health: () => {} });

  const users = announcingUsers(failing<UserStore>(), bus);
  const sessions = announcingSessions(failing<SessionStore>(), bus);
  const limiter = announcingLimiter(failing<LimiterPort>(), bus);
  const apiKeys = announcingApiKeys(failing<ApiKeyStore>(), bus);
  const subjects = announcingSubjects(failing<SubjectStore>(), bus);
  const lifetimes = { idleMs: 1000, maxAgeMs: 1000, maxPerUser: 1 };

  it.each<[string, () => Promise<unknown>, string]>([
    ["a key's removal", () => apiKeys.remove("0123456789abcdef"), "k:0123456789abcdef"],
    ["a key's change", () => apiKeys.update("0123456789abcdef", { blocked: true }), "k:0123456789abcdef"],
    ["a user's removal", () => users.remove("usr_1"), "u:usr_1"],
    ["a user's change", () => users.update("usr_1", { tier: "pro" }), "u:usr_1"],
    ["a session's revocation", () => sessions.revoke("usr_1", "sid"), "u:usr_1"],
    ["every session's revocation", () => sessions.revokeAll("usr_1"), "u:usr_1"],
    [
      "a login that may have evicted sessions",
      () =>
        sessions.create(
          { userId: "usr_1", passwordHash: "x", deviceName: "d", ip: "192.0.2.1", userAgent: "ua" },
          lifetimes,
        ),
      "u:usr_1",
    ],
    ["a reset of windows", () => limiter.reset("k:0123456789abcdef", ["search"]), "k:0123456789abcdef"],
    ["a provider subject's change", () => subjects.update("x:abc", { blocked: true }), "x:abc"],
  ])("announces %s that failed, and still fails", async (_what, change, subject) => {
    heard.length = 0;
    await expect(change()).rejects.toThrow("the store failed after the change was made");
    expect(heard).toEqual([subject]);
  });
});
