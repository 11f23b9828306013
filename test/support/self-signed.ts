// A throwaway self-signed certificate for 127.0.0.1 and localhost (EC P-256, one day), made by
// openssl for the tests that speak TLS: the files' paths, in a folder of their own.
import { execFileSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findBinary } from "./binaries.js";

export function selfSignedCert(prefix: string): { cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const [cert, key] = [join(dir, "cert.pem"), join(dir, "key.pem")];
  execFileSync(
    findBinary("openssl"),
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-days",
      "1",
      "-subj",
      "/CN=localhost",
      "-addext",
      "subjectAltName=IP:127.0.0.1,DNS:localhost",
      "-keyout",
      key,
      "-out",
      cert,
    ],
    { stdio: "ignore" },
  );
  return { cert, key };
}
