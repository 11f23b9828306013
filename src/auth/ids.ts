// Identifiers of users and sessions: random, URL-safe, and the same whichever store holds them.
import { randomBytes } from "node:crypto";

export const newUserId = (): string => `usr_${randomBytes(8).toString("hex")}`;
export const newSessionId = (): string => randomBytes(16).toString("base64url");
