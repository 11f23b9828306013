// An identity provider of the tests' own: node:http serving an OIDC discovery document and a JWKS of
// keys made with node:crypto, and a signer of tokens with those keys (or with anything a test wants
// to forge). It counts what it was asked, can be slowed down, taken down and rotated.
import { constants, createHmac, sign as cryptoSign, generateKeyPairSync, type KeyObject } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export type TestAlgorithm = "RS256" | "PS256" | "ES256" | "ES384" | "EdDSA";

/** `kid` "": a key the JWKS lists without a kid (sign with header `{ kid: undefined }` for a token without one). */
export type TestKey = { kid: string; alg: TestAlgorithm; privateKey: KeyObject; publicKey: KeyObject };

export function makeKey(kid: string, alg: TestAlgorithm = "RS256"): TestKey {
  const pair =
    alg === "RS256" || alg === "PS256"
      ? generateKeyPairSync("rsa", { modulusLength: 2048 })
      : alg === "ES256"
        ? generateKeyPairSync("ec", { namedCurve: "P-256" })
        : alg === "ES384"
          ? generateKeyPairSync("ec", { namedCurve: "P-384" })
          : generateKeyPairSync("ed25519");
  return { kid, alg, privateKey: pair.privateKey, publicKey: pair.publicKey };
}

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString("base64url");

/** A compact JWS of `payload` signed with `key` (header `alg`/`kid` overridable, to forge). */
export function signToken(
  key: TestKey,
  payload: Record<string, unknown>,
  header: Record<string, unknown> = {},
): string {
  const head = b64({ alg: key.alg, typ: "JWT", kid: key.kid, ...header });
  const input = `${head}.${b64(payload)}`;
  const hash = key.alg === "EdDSA" ? null : key.alg === "ES384" ? "sha384" : "sha256";
  const options =
    key.alg === "PS256"
      ? { key: key.privateKey, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 }
      : key.alg.startsWith("ES")
        ? { key: key.privateKey, dsaEncoding: "ieee-p1363" as const }
        : key.privateKey;
  return `${input}.${cryptoSign(hash, Buffer.from(input), options).toString("base64url")}`;
}

/** An HS256 token whose HMAC secret is `secret` (e.g. a provider's public key as PEM): a forgery. */
export function signHs256(secret: string | Buffer, payload: Record<string, unknown>, kid?: string): string {
  const input = `${b64({ alg: "HS256", typ: "JWT", ...(kid === undefined ? {} : { kid }) })}.${b64(payload)}`;
  return `${input}.${createHmac("sha256", secret).update(input).digest("base64url")}`;
}

/** An unsigned token (`alg: none`). */
export function unsigned(payload: Record<string, unknown>, kid?: string): string {
  return `${b64({ alg: "none", typ: "JWT", ...(kid === undefined ? {} : { kid }) })}.${b64(payload)}.`;
}

export type JwksServer = {
  url: string;
  issuer: string;
  jwksUrl: string;
  /** The keys the JWKS lists now. */
  keys: TestKey[];
  /** Requests for the JWKS so far (the discovery document's apart). */
  jwksRequests(): number;
  discoveryRequests(): number;
  /** Down: every answer is 503. */
  down: boolean;
  /** Each answer waits this long first. */
  delayMs: number;
  cacheControl: string | undefined;
  /** JWKs served after `keys`' as they are: keys no test signer holds, or holds but a JWKS should not give. */
  rawKeys: Record<string, unknown>[];
  close(): Promise<void>;
};

export async function startJwksServer(initial: TestKey[]): Promise<JwksServer> {
  let jwks = 0;
  let discovery = 0;
  let server: Server | undefined;
  const state: JwksServer = {
    url: "",
    issuer: "",
    jwksUrl: "",
    keys: initial,
    jwksRequests: () => jwks,
    discoveryRequests: () => discovery,
    down: false,
    delayMs: 0,
    cacheControl: undefined,
    rawKeys: [],
    close: () => new Promise((resolve) => server?.close(() => resolve()) ?? resolve()),
  };
  server = createServer((req, res) => {
    const answer = () => {
      if (state.down) {
        res.writeHead(503).end("down");
        return;
      }
      if (req.url === "/.well-known/openid-configuration") {
        discovery += 1;
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ issuer: state.issuer, jwks_uri: state.jwksUrl }));
        return;
      }
      if (req.url === "/jwks.json") {
        jwks += 1;
        const keys = state.keys.map((k) => ({
          ...(k.publicKey.export({ format: "jwk" }) as Record<string, unknown>),
          ...(k.kid === "" ? {} : { kid: k.kid }),
          alg: k.alg,
          use: "sig",
        }));
        res.writeHead(200, {
          "content-type": "application/json",
          ...(state.cacheControl === undefined ? {} : { "cache-control": state.cacheControl }),
        });
        res.end(JSON.stringify({ keys: [...keys, ...state.rawKeys] }));
        return;
      }
      res.writeHead(404).end();
    };
    if (state.delayMs > 0) setTimeout(answer, state.delayMs);
    else answer();
  });
  server.keepAliveTimeout = 1;
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  state.url = `http://127.0.0.1:${port}`;
  state.issuer = `${state.url}/`;
  state.jwksUrl = `${state.url}/jwks.json`;
  return state;
}

/** A public key as PEM: the bytes a forger has, to try as an HMAC secret. */
export const publicPem = (key: TestKey): string =>
  key.publicKey.export({ type: "spki", format: "pem" }) as string;
