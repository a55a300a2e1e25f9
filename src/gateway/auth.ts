/**
 * Who may use the gateway over HTTP: a shared bearer token, or OAuth 2.1 as a resource server. Either way the
 * protected-resource metadata (RFC 9728) is served without a token, a request without one gets 401 with
 * `WWW-Authenticate: Bearer resource_metadata="…"`, a bad one `error="invalid_token"`, and one lacking a required scope
 * 403 `error="insufficient_scope"`. In OAuth mode an access token is a JWT signed by a key of the configured
 * authorization server's JWKS (checked with `jose`), issued by it, for this gateway (its audience, RFC 8707), not
 * expired, naming its subject (`sub`, which RFC 9068 requires: the principal sessions and waiting runs belong to), with
 * the required scopes. A client's token is never passed on: upstream servers get only the headers of
 * their own config.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { createRemoteJWKSet, errors, type JWTPayload, jwtVerify } from "jose";
import { optionKeys, refuseUnknownOptions } from "../platform/options.ts";

/** Path prefix of the protected-resource metadata (RFC 9728 §3). */
export const PROTECTED_RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource";
/** Clock skew allowed when checking a token's `exp` and `nbf`, in seconds. */
export const OAUTH_CLOCK_TOLERANCE_S = 30;
/** How long fetching the authorization server's metadata or keys may take. */
export const OAUTH_FETCH_TIMEOUT_MS = 10_000;
/** Signing algorithms accepted by default: asymmetric ones only (a shared-secret HS256 token is refused). */
export const DEFAULT_OAUTH_ALGORITHMS = [
  "RS256",
  "RS384",
  "RS512",
  "PS256",
  "PS384",
  "PS512",
  "ES256",
  "ES384",
  "ES512",
  "EdDSA",
];
/** Longest `Authorization` header value looked at: a larger one is refused unread. */
export const MAX_AUTHORIZATION_CHARS = 16_384;

export interface OAuthResourceServerOptions {
  /** The authorization server's issuer identifier, as its tokens' `iss` says it (an https URL; http for loopback). */
  issuer: string;
  /**
   * Where its signing keys are. Default: the `jwks_uri` of its metadata, read at start from
   * `/.well-known/oauth-authorization-server` (RFC 8414), else `/.well-known/openid-configuration`.
   */
  jwksUri?: string;
  /** The audience tokens must be for (RFC 8707): this gateway's resource identifier. Default its public URL. */
  audience?: string;
  /** Scopes every token must carry. Default none. */
  requiredScopes?: string[];
  /** Signing algorithms accepted. Default `DEFAULT_OAUTH_ALGORITHMS`. */
  algorithms?: string[];
}

export const OAUTH_KEYS = optionKeys<OAuthResourceServerOptions>({
  issuer: true,
  jwksUri: true,
  audience: true,
  requiredScopes: true,
  algorithms: true,
});

/** Who sent a request, once its token was checked. */
export interface Principal {
  /** `issuer|subject` for OAuth tokens (a token without `sub` is refused), "token" for the shared bearer token. */
  id: string;
  scopes: string[];
  claims?: JWTPayload;
}

/** The outcome of checking a request's `Authorization` header. */
export type AuthCheck =
  | { ok: true; principal: Principal }
  | { ok: false; status: 401 | 403; challenge: string; message: string };

export interface Authenticator {
  /** The protected-resource metadata document. */
  metadata(): Record<string, unknown>;
  check(authorization: string | undefined): Promise<AuthCheck>;
}

/** A challenge's quoted parameter value: quotes and backslashes escaped, control characters dropped. */
function quoted(value: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is dropped
  return `"${value.replace(/[\u0000-\u001f\u007f]/g, "").replace(/["\\]/g, "\\$&")}"`;
}

/** The token of `Authorization: Bearer <token>`: any printable ASCII run, or only RFC 6750's token characters. */
function bearerToken(authorization: string | undefined, strict = false): string | undefined {
  if (authorization === undefined || authorization.length > MAX_AUTHORIZATION_CHARS) return undefined;
  const pattern = strict ? /^Bearer ([A-Za-z0-9\-._~+/]+=*)$/i : /^Bearer (\S+)$/i;
  return pattern.exec(authorization.trim())?.[1];
}

/** The shared bearer token of `--token-env`: compared as digests, in constant time. */
export function sharedTokenAuthenticator(token: string, resource: string, metadataUrl: string): Authenticator {
  const digest = sha256(token);
  const challenge = (extra: string) => `Bearer realm="airlock"${extra}, resource_metadata=${quoted(metadataUrl)}`;
  return {
    metadata: () => ({ resource, bearer_methods_supported: ["header"], resource_name: "Airlock gateway" }),
    async check(authorization) {
      const given = bearerToken(authorization);
      if (given === undefined) {
        return {
          ok: false,
          status: 401,
          challenge: challenge(""),
          message: "Unauthorized: send Authorization: Bearer <token>",
        };
      }
      if (!timingSafeEqual(sha256(given), digest)) {
        return {
          ok: false,
          status: 401,
          challenge: challenge(`, error="invalid_token", error_description="the token is not the gateway's"`),
          message: "Unauthorized: the token is not the gateway's",
        };
      }
      return { ok: true, principal: { id: "token", scopes: [] } };
    },
  };
}

/**
 * The OAuth resource server: finds the issuer's keys (its metadata, unless `jwksUri` is given) and then checks each
 * request's token against them. Rejects when the issuer's metadata cannot be read or does not name the issuer.
 */
export async function oauthAuthenticator(
  options: OAuthResourceServerOptions,
  resource: string,
  metadataUrl: string,
): Promise<Authenticator> {
  refuseUnknownOptions(options, "oauth", OAUTH_KEYS);
  const issuer = checkUrl(options.issuer, "oauth.issuer");
  const audience = options.audience ?? resource;
  checkUrl(audience, "oauth.audience");
  const required = checkScopes(options.requiredScopes ?? [], "oauth.requiredScopes");
  const algorithms = options.algorithms ?? DEFAULT_OAUTH_ALGORITHMS;
  if (!Array.isArray(algorithms) || algorithms.length === 0 || algorithms.some((a) => typeof a !== "string")) {
    throw new TypeError("oauth.algorithms must be a non-empty array of algorithm names");
  }
  if (algorithms.some((a) => a.startsWith("HS") || a === "none")) {
    throw new TypeError("oauth.algorithms may not hold HS* or none: tokens are checked with the issuer's public keys");
  }
  const jwksUri =
    options.jwksUri === undefined ? await discoverJwks(issuer) : checkUrl(options.jwksUri, "oauth.jwksUri");
  const keys = createRemoteJWKSet(new URL(jwksUri), { timeoutDuration: OAUTH_FETCH_TIMEOUT_MS });
  const scopeParam = required.length === 0 ? "" : `, scope=${quoted(required.join(" "))}`;
  const challenge = (extra: string) => `Bearer resource_metadata=${quoted(metadataUrl)}${scopeParam}${extra}`;
  const refuse = (status: 401 | 403, error: string, description: string): AuthCheck => ({
    ok: false,
    status,
    challenge: challenge(`, error=${quoted(error)}, error_description=${quoted(description)}`),
    message: `${status === 401 ? "Unauthorized" : "Forbidden"}: ${description}`,
  });
  return {
    metadata: () => ({
      resource,
      authorization_servers: [issuer],
      bearer_methods_supported: ["header"],
      ...(required.length === 0 ? {} : { scopes_supported: required }),
      resource_name: "Airlock gateway",
    }),
    async check(authorization) {
      if (authorization === undefined || authorization.trim() === "") {
        return {
          ok: false,
          status: 401,
          challenge: challenge(""),
          message: "Unauthorized: send an OAuth access token",
        };
      }
      const token = bearerToken(authorization, true);
      if (token === undefined)
        return refuse(401, "invalid_request", "send the access token as Authorization: Bearer <token>");
      let claims: JWTPayload;
      try {
        ({ payload: claims } = await jwtVerify(token, keys, {
          issuer,
          audience,
          algorithms,
          clockTolerance: OAUTH_CLOCK_TOLERANCE_S,
          requiredClaims: ["exp"],
        }));
      } catch (error) {
        return refuse(401, "invalid_token", tokenProblem(error));
      }
      // Sessions and waiting runs belong to the subject: a token that names none would share them with every other
      // such token. RFC 9068 (JWT access tokens) requires `sub`, also for a client acting on its own behalf.
      if (typeof claims.sub !== "string" || claims.sub === "") {
        return refuse(401, "invalid_token", "the token names no subject (its sub claim)");
      }
      const scopes = scopesOf(claims);
      const missing = required.filter((scope) => !scopes.includes(scope));
      if (missing.length > 0)
        return refuse(403, "insufficient_scope", `the token lacks the scope ${missing.join(" ")}`);
      return { ok: true, principal: { id: `${issuer}|${claims.sub}`, scopes, claims } };
    },
  };
}

/** Why a token was refused, in Airlock's words (never the token's own content). */
function tokenProblem(error: unknown): string {
  if (error instanceof errors.JWTExpired) return "the token has expired";
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.claim === "iss") return "the token was not issued by the gateway's authorization server";
    if (error.claim === "aud") return "the token is not for this gateway (its audience)";
    if (error.claim === "nbf") return "the token is not valid yet";
    return `the token's ${error.claim} claim is not valid`;
  }
  if (error instanceof errors.JWSSignatureVerificationFailed || error instanceof errors.JWKSNoMatchingKey) {
    return "the token is not signed by a key of the authorization server";
  }
  if (error instanceof errors.JOSEAlgNotAllowed)
    return "the token is signed with an algorithm the gateway does not accept";
  if (error instanceof errors.JWKSTimeout || (error as { code?: unknown })?.code === "ERR_JOSE_GENERIC") {
    return "the authorization server's keys could not be fetched";
  }
  return "the token is not a valid access token";
}

function scopesOf(claims: JWTPayload): string[] {
  const { scope, scp } = claims as { scope?: unknown; scp?: unknown };
  if (typeof scope === "string") return scope.split(" ").filter((s) => s !== "");
  if (Array.isArray(scp)) return scp.filter((s): s is string => typeof s === "string");
  if (typeof scp === "string") return scp.split(" ").filter((s) => s !== "");
  return [];
}

/** The `jwks_uri` of the issuer's metadata (RFC 8414, then OpenID Connect discovery), whose `issuer` must match. */
async function discoverJwks(issuer: string): Promise<string> {
  const url = new URL(issuer);
  const path = url.pathname === "/" ? "" : url.pathname.replace(/\/$/, "");
  const candidates = [
    `${url.origin}/.well-known/oauth-authorization-server${path}`,
    `${url.origin}${path}/.well-known/openid-configuration`,
  ];
  const problems: string[] = [];
  for (const candidate of candidates) {
    let metadata: { issuer?: unknown; jwks_uri?: unknown };
    try {
      const response = await fetch(candidate, {
        signal: AbortSignal.timeout(OAUTH_FETCH_TIMEOUT_MS),
        redirect: "error",
      });
      if (!response.ok) {
        problems.push(`${candidate}: HTTP ${response.status}`);
        continue;
      }
      metadata = (await response.json()) as typeof metadata;
    } catch (error) {
      problems.push(`${candidate}: ${(error as Error).message}`);
      continue;
    }
    if (metadata.issuer !== issuer) {
      throw new Error(
        `the authorization server's metadata at ${candidate} names the issuer ${JSON.stringify(metadata.issuer)}, not ${JSON.stringify(issuer)}`,
      );
    }
    if (typeof metadata.jwks_uri !== "string")
      throw new Error(`the authorization server's metadata at ${candidate} has no jwks_uri`);
    return checkUrl(metadata.jwks_uri, "the metadata's jwks_uri");
  }
  throw new Error(`the metadata of the authorization server ${issuer} could not be read (${problems.join("; ")})`);
}

/** An https URL (or http on a loopback address), as text. */
function checkUrl(value: unknown, name: string): string {
  if (typeof value !== "string" || value === "") throw new TypeError(`${name} must be a URL`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TypeError(`${name} is not a valid URL: ${JSON.stringify(value)}`);
  }
  const loopback = url.hostname === "localhost" || url.hostname === "[::1]" || url.hostname.startsWith("127.");
  if (url.protocol !== "https:" && !(url.protocol === "http:" && loopback)) {
    throw new TypeError(`${name} must be an https URL (http only on a loopback address), got ${JSON.stringify(value)}`);
  }
  return value;
}

function checkScopes(scopes: unknown, name: string): string[] {
  if (
    !Array.isArray(scopes) ||
    scopes.some((scope) => typeof scope !== "string" || !/^[\x21\x23-\x5b\x5d-\x7e]+$/.test(scope))
  ) {
    throw new TypeError(
      `${name} must be an array of scope names (printable ASCII without spaces, quotes or backslashes)`,
    );
  }
  return scopes as string[];
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}
