/**
 * Promotion: a signed statement that a container image passed a clean vulnerability scan. It binds the image's exact
 * id and its provenance digest (see container-image.ts), names the builder and the scan (scanner, version, the digest of the
 * report, when it finished, and its counts of critical, high and unknown findings) and when it was issued and expires.
 * The builder signs the statement's canonical JSON with an Ed25519 key; the host pins the public key. Everything is
 * checked with `node:crypto` and nothing else: a missing, stale, forged or non-clean statement is refused with a
 * `DockerPromotionError` (a TypeError) that says which, and the promoted adapter then runs nothing.
 */
import { createHash, createPrivateKey, createPublicKey, sign, verify } from "node:crypto";
import { canonicalJson, copyJson, type JsonValue } from "../json/index.ts";

export const PROMOTION_FORMAT = "airlock-docker-promotion-v1";
/** Default and largest age of the scan behind a promotion, when it is checked. */
export const DEFAULT_MAX_SCAN_AGE_MS = 24 * 60 * 60 * 1000;
export const MAX_SCAN_AGE_MS = 7 * 24 * 60 * 60 * 1000;
/** Bytes of a promotion's JSON, and of a SARIF report a promotion is issued from. */
const MAX_PROMOTION_BYTES = 64 * 1024;
const MAX_SARIF_BYTES = 16 * 1024 * 1024;

export interface DockerImagePromotionStatement {
  readonly format: typeof PROMOTION_FORMAT;
  /** The image id (`sha256:…`) and its provenance digest (`sha256:…`), exactly as the adapter is configured. */
  readonly subject: { readonly image: string; readonly provenance: string };
  readonly builderId: string;
  readonly scan: {
    readonly scannerId: string;
    readonly scannerVersion: string;
    /** `sha256:` of the scan report's bytes, so that the report can be found and checked later. */
    readonly reportDigest: string;
    /** ISO 8601, as `Date.prototype.toISOString` writes it. */
    readonly completedAt: string;
    readonly critical: number;
    readonly high: number;
    readonly unknown: number;
  };
  readonly issuedAt: string;
  readonly expiresAt: string;
}

export interface DockerImagePromotion {
  readonly statement: DockerImagePromotionStatement;
  /** `base64:` and the Ed25519 signature of `serializeDockerImagePromotion(statement)`. */
  readonly signature: string;
  /** The Ed25519 public key the host trusts, as SubjectPublicKeyInfo PEM. Pin it in the application, not in data. */
  readonly publicKey: string;
}

export interface DockerImagePromotionIssuance {
  /** The scan's SARIF report (JSON text); a promotion is issued only when every run in it has no results. */
  readonly sarif: string;
  readonly image: string;
  readonly provenance: string;
  readonly builderId: string;
  readonly scannerId: string;
  readonly scannerVersion: string;
  readonly completedAt: string;
  readonly issuedAt: string;
  readonly expiresAt: string;
  /** The builder's Ed25519 private key, PKCS#8 PEM. It is not kept. */
  readonly privateKey: string;
}

/** A promotion that is missing, malformed, forged, stale or reports findings; the message says which. */
export class DockerPromotionError extends TypeError {
  override readonly name = "DockerPromotionError";
}

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const IDENTIFIER = /^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$/;

function refuse(message: string): never {
  throw new DockerPromotionError(message);
}

/** The fields of a plain JSON object that has exactly `keys` (its getters are never run). */
function exactly(value: unknown, keys: readonly string[], what: string): Record<string, JsonValue> {
  let copied: JsonValue;
  try {
    copied = copyJson(value, { maxBytes: MAX_PROMOTION_BYTES }).value;
  } catch {
    refuse(`${what} must be plain JSON data of at most ${MAX_PROMOTION_BYTES} bytes`);
  }
  if (typeof copied !== "object" || copied === null || Array.isArray(copied)) refuse(`${what} must be an object`);
  const present = Object.keys(copied);
  if (present.length !== keys.length || !keys.every((key) => Object.hasOwn(copied, key))) {
    refuse(`${what} must have exactly the fields ${keys.join(", ")}`);
  }
  return copied as Record<string, JsonValue>;
}

function text(value: JsonValue | undefined, field: string, pattern: RegExp): string {
  if (typeof value !== "string" || !pattern.test(value)) refuse(`the promotion's ${field} is not well formed`);
  return value;
}

function count(value: JsonValue | undefined, field: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    refuse(`the promotion's ${field} must be a non-negative integer`);
  }
  return value;
}

function instant(value: JsonValue | undefined, field: string): number {
  const time = typeof value === "string" ? Date.parse(value) : Number.NaN;
  if (!Number.isFinite(time) || new Date(time).toISOString() !== value) {
    refuse(`the promotion's ${field} must be a time as Date.prototype.toISOString writes it`);
  }
  return time;
}

/** Checks a statement's shape and returns a frozen copy of it. */
function checkStatement(value: unknown): DockerImagePromotionStatement {
  const root = exactly(value, ["format", "subject", "builderId", "scan", "issuedAt", "expiresAt"], "a statement");
  if (root.format !== PROMOTION_FORMAT) refuse(`the statement's format must be "${PROMOTION_FORMAT}"`);
  const subject = exactly(root.subject, ["image", "provenance"], "the statement's subject");
  const scan = exactly(
    root.scan,
    ["scannerId", "scannerVersion", "reportDigest", "completedAt", "critical", "high", "unknown"],
    "the statement's scan",
  );
  const completed = instant(scan.completedAt, "scan.completedAt");
  const issued = instant(root.issuedAt, "issuedAt");
  const expires = instant(root.expiresAt, "expiresAt");
  if (completed > issued || issued >= expires) {
    refuse("the promotion's times must satisfy scan.completedAt <= issuedAt < expiresAt");
  }
  return Object.freeze({
    format: PROMOTION_FORMAT,
    subject: Object.freeze({
      image: text(subject.image, "subject.image", DIGEST),
      provenance: text(subject.provenance, "subject.provenance", DIGEST),
    }),
    builderId: text(root.builderId, "builderId", IDENTIFIER),
    scan: Object.freeze({
      scannerId: text(scan.scannerId, "scan.scannerId", IDENTIFIER),
      scannerVersion: text(scan.scannerVersion, "scan.scannerVersion", IDENTIFIER),
      reportDigest: text(scan.reportDigest, "scan.reportDigest", DIGEST),
      completedAt: scan.completedAt as string,
      critical: count(scan.critical, "scan.critical"),
      high: count(scan.high, "scan.high"),
      unknown: count(scan.unknown, "scan.unknown"),
    }),
    issuedAt: root.issuedAt as string,
    expiresAt: root.expiresAt as string,
  });
}

/** The exact bytes a builder signs: the canonical JSON of a well-formed statement (keys sorted, no whitespace). */
export function serializeDockerImagePromotion(statement: DockerImagePromotionStatement): string {
  return canonicalJson(checkStatement(statement), { maxBytes: MAX_PROMOTION_BYTES });
}

const SIGNATURE = /^base64:[A-Za-z0-9+/]+={0,2}$/;

/** Checks a promotion's shape and its signature (not yet its subject, findings or times). */
function checkSigned(value: unknown): DockerImagePromotion {
  if (value === undefined || value === null) refuse("a promotion is required: no statement was given");
  const fields = exactly(value, ["statement", "signature", "publicKey"], "a promotion");
  const statement = checkStatement(fields.statement);
  const { signature, publicKey } = fields;
  if (typeof signature !== "string" || !SIGNATURE.test(signature)) {
    refuse('the promotion\'s signature must be "base64:" and the base64 of an Ed25519 signature');
  }
  const encoded = signature.slice("base64:".length);
  const bytes = Buffer.from(encoded, "base64");
  if (bytes.length !== 64 || bytes.toString("base64") !== encoded) {
    refuse("the promotion's signature is not the base64 of a 64-byte Ed25519 signature");
  }
  if (typeof publicKey !== "string" || publicKey.length > 4_096) refuse("the promotion's publicKey must be PEM text");
  let key: ReturnType<typeof createPublicKey>;
  try {
    key = createPublicKey(publicKey);
  } catch {
    refuse("the promotion's publicKey is not a PEM public key");
  }
  if (key.asymmetricKeyType !== "ed25519") refuse("the promotion's publicKey must be an Ed25519 key");
  const signed = Buffer.from(serializeDockerImagePromotion(statement), "utf8");
  if (!verify(null, signed, key, bytes)) {
    refuse("the promotion is forged: its signature does not verify with the pinned public key");
  }
  return Object.freeze({ statement, signature, publicKey });
}

export function checkMaxScanAge(value: unknown): number {
  if (value === undefined) return DEFAULT_MAX_SCAN_AGE_MS;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 || value > MAX_SCAN_AGE_MS) {
    refuse(`maxScanAgeMs must be an integer from 1 to ${MAX_SCAN_AGE_MS} (seven days)`);
  }
  return value;
}

/**
 * Verifies a promotion for the image and provenance the adapter uses, at `now`: its shape, its signature with its
 * pinned key, its subject, a clean scan (no critical, high or unknown findings), and its times (issued, not expired,
 * the scan at most `maxScanAgeMs` old). Returns the statement, or throws a `DockerPromotionError` saying why.
 */
export function verifyDockerImagePromotion(
  promotion: DockerImagePromotion,
  expected: { readonly image: string; readonly provenance: string },
  maxScanAgeMs: number = DEFAULT_MAX_SCAN_AGE_MS,
  now: number = Date.now(),
): DockerImagePromotionStatement {
  const maxAge = checkMaxScanAge(maxScanAgeMs);
  const { statement } = checkSigned(promotion);
  if (statement.subject.image !== expected.image || statement.subject.provenance !== expected.provenance) {
    refuse("the promotion is for another image or provenance than the adapter's");
  }
  const { critical, high, unknown } = statement.scan;
  if (critical !== 0 || high !== 0 || unknown !== 0) {
    refuse(
      `the promotion's scan is not clean (${critical} critical, ${high} high, ${unknown} unknown findings): fix them and promote the image again`,
    );
  }
  if (now < Date.parse(statement.issuedAt)) {
    refuse(`the promotion is stale: it is not valid before ${statement.issuedAt} (check the host's clock)`);
  }
  if (now >= Date.parse(statement.expiresAt)) {
    refuse(`the promotion is stale: it expired at ${statement.expiresAt}; scan the image and promote it again`);
  }
  if (now - Date.parse(statement.scan.completedAt) > maxAge) {
    refuse(
      `the promotion is stale: its scan of ${statement.scan.completedAt} is older than maxScanAgeMs (${maxAge} ms); scan the image again`,
    );
  }
  return statement;
}

/**
 * Issues a promotion from a scan's SARIF report, for a builder's CI: only when the report has at least one run and no
 * run has results. The report's digest goes into the statement; the private key is used once and not kept.
 */
export function issueDockerImagePromotion(issuance: DockerImagePromotionIssuance): DockerImagePromotion {
  if (typeof issuance !== "object" || issuance === null) refuse("issueDockerImagePromotion needs an object");
  const { sarif, privateKey } = issuance;
  if (typeof sarif !== "string" || Buffer.byteLength(sarif) > MAX_SARIF_BYTES) {
    refuse(`sarif must be the scan's SARIF report, at most ${MAX_SARIF_BYTES} bytes of JSON text`);
  }
  let report: unknown;
  try {
    report = JSON.parse(sarif);
  } catch {
    refuse("sarif is not JSON");
  }
  const runs = (report as { version?: unknown; runs?: unknown } | null)?.runs;
  if ((report as { version?: unknown } | null)?.version !== "2.1.0" || !Array.isArray(runs) || runs.length === 0) {
    refuse("sarif must be a SARIF 2.1.0 report with at least one run");
  }
  for (const run of runs as unknown[]) {
    const results = (run as { results?: unknown } | null)?.results;
    if (!Array.isArray(results)) refuse("every run of the SARIF report must have a results array");
    if (results.length > 0) refuse(`the scan reports ${results.length} finding(s): the image cannot be promoted`);
  }
  if (typeof privateKey !== "string" || privateKey.length > 16_384) refuse("privateKey must be PEM text");
  let key: ReturnType<typeof createPrivateKey>;
  try {
    key = createPrivateKey(privateKey);
  } catch {
    refuse("privateKey is not a PEM private key");
  }
  if (key.asymmetricKeyType !== "ed25519") refuse("privateKey must be an Ed25519 key");
  const statement = checkStatement({
    format: PROMOTION_FORMAT,
    subject: { image: issuance.image, provenance: issuance.provenance },
    builderId: issuance.builderId,
    scan: {
      scannerId: issuance.scannerId,
      scannerVersion: issuance.scannerVersion,
      reportDigest: `sha256:${createHash("sha256").update(sarif, "utf8").digest("hex")}`,
      completedAt: issuance.completedAt,
      critical: 0,
      high: 0,
      unknown: 0,
    },
    issuedAt: issuance.issuedAt,
    expiresAt: issuance.expiresAt,
  });
  const signature = sign(null, Buffer.from(serializeDockerImagePromotion(statement), "utf8"), key);
  const publicKey = createPublicKey(key).export({ type: "spki", format: "pem" }).toString();
  return checkSigned({ statement, signature: `base64:${signature.toString("base64")}`, publicKey });
}
