// The secrets of every tollgate the tests and the bench start, in this process or as a process of its
// own: one JWT secret, one admin token and one metrics token. Each is over 32 bytes and varied enough
// for production's predictability checks; being written here they are published, so src/config/secrets.ts
// lists them and production refuses them (test/unit/published-secrets.test.ts keeps that list whole).

export const JWT_SECRET = "test-jwt-secret-0123456789-abcdefghij";
export const ADMIN_TOKEN = "test-admin-token-0123456789-abcdefghij";
export const METRICS_TOKEN = "metrics-test-scrape-token-0123456789";
