// Key files checked at start-up, so that a wrong one stops it naming its variable: the JWT key pair
// against the algorithm that signs, the gRPC listener's certificate against its key.
import { createPrivateKey, createPublicKey, type KeyObject, X509Certificate } from "node:crypto";
import type { Reader } from "./env-reader.js";

/** What jsonwebtoken signs each algorithm with: any other key fails every login with a 500. */
const SIGNING_KEYS: Record<string, { type: string; curve?: string; minBits?: number; text: string }> = {
  RS256: { type: "rsa", minBits: 2048, text: "an RSA key of at least 2048 bits" },
  ES256: { type: "ec", curve: "prime256v1", text: "an EC key on curve P-256" },
};

function parse(reader: Reader, name: string, text: string, make: (pem: string) => KeyObject) {
  try {
    return make(text);
  } catch {
    reader.problems.push(`${name}: not a PEM ${make === createPublicKey ? "public" : "private"} key`);
    return undefined;
  }
}

function describe(key: KeyObject): string {
  const details = key.asymmetricKeyDetails;
  if (key.asymmetricKeyType === "rsa") return `a ${details?.modulusLength ?? "?"}-bit RSA key`;
  if (key.asymmetricKeyType === "ec") return `an EC key on curve ${details?.namedCurve ?? "?"}`;
  return `an ${key.asymmetricKeyType ?? "unknown"} key`;
}

function fits(key: KeyObject, need: (typeof SIGNING_KEYS)[string]): boolean {
  const details = key.asymmetricKeyDetails;
  return (
    key.asymmetricKeyType === need.type &&
    (need.curve === undefined || details?.namedCurve === need.curve) &&
    (need.minBits === undefined || (details?.modulusLength ?? 0) >= need.minBits)
  );
}

const spki = (key: KeyObject) => key.export({ type: "spki", format: "der" });

/**
 * Reads both key files when an algorithm of JWT_ALGORITHMS takes them. When such an algorithm signs
 * (the list's first), the private key must fit it and the public key be its own half: otherwise every
 * login would fail (500) or every token it signed would fail verification (401), found only then.
 */
export function readJwtKeys(
  reader: Reader,
  algorithms: readonly string[],
): { privateKey: string | undefined; publicKey: string | undefined } {
  if (algorithms.every((a) => a.startsWith("HS"))) return { privateKey: undefined, publicKey: undefined };
  const privateKey = reader.file("JWT_PRIVATE_KEY_FILE");
  const publicKey = reader.file("JWT_PUBLIC_KEY_FILE");
  for (const name of ["JWT_PRIVATE_KEY_FILE", "JWT_PUBLIC_KEY_FILE"] as const) {
    if (reader.raw(name) === undefined) {
      reader.problems.push(`${name}: required when JWT_ALGORITHMS includes RS256 or ES256`);
    }
  }
  const privateObject =
    privateKey === undefined
      ? undefined
      : parse(reader, "JWT_PRIVATE_KEY_FILE", privateKey, createPrivateKey);
  const publicObject =
    publicKey === undefined ? undefined : parse(reader, "JWT_PUBLIC_KEY_FILE", publicKey, createPublicKey);
  const signing = algorithms[0] ?? "HS256";
  const need = SIGNING_KEYS[signing];
  if (need === undefined || privateObject === undefined) return { privateKey, publicKey };
  if (!fits(privateObject, need)) {
    reader.problems.push(
      `JWT_PRIVATE_KEY_FILE: ${signing} signs with ${need.text}, this is ${describe(privateObject)}`,
    );
  } else if (publicObject !== undefined && !spki(createPublicKey(privateObject)).equals(spki(publicObject))) {
    reader.problems.push(
      "JWT_PUBLIC_KEY_FILE: not the public half of JWT_PRIVATE_KEY_FILE (no token signed with it would verify)",
    );
  }
  return { privateKey, publicKey };
}

/**
 * GRPC_TLS_CERT_FILE and GRPC_TLS_KEY_FILE: a certificate, and the private key of its public key.
 * Otherwise the listener's TLS set-up failed with OpenSSL's words alone ("no start line", "key values
 * mismatch"), naming no variable.
 */
export function checkTlsFiles(reader: Reader, cert: string, key: string): boolean {
  let certificate: X509Certificate | undefined;
  try {
    certificate = new X509Certificate(cert);
  } catch {
    reader.problems.push("GRPC_TLS_CERT_FILE: not a PEM certificate");
  }
  const privateKey = parse(reader, "GRPC_TLS_KEY_FILE", key, createPrivateKey);
  if (certificate === undefined || privateKey === undefined) return false;
  if (certificate.checkPrivateKey(privateKey)) return true;
  reader.problems.push("GRPC_TLS_KEY_FILE: not the private key of GRPC_TLS_CERT_FILE's certificate");
  return false;
}
