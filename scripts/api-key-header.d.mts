export const RESERVED_HEADERS: string[];
export function apiKeyHeaderProblem(value: string): string | undefined;
