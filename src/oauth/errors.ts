// The token endpoint's errors (docs/credentials.md): RFC 6749 §5.2 JSON, `{"error",
// "error_description"}`, never problem+json, since OAuth clients parse this shape. Anything else
// thrown on the endpoint (a store deadline, a body too slow, a bug) is mapped onto it here.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { toApiError } from '../http/error-handler.js'

export type OAuthErrorCode =
  | 'invalid_request'
  | 'invalid_client'
  | 'unsupported_grant_type'
  | 'invalid_scope'
  // The client authenticated, but may not have a token from where it asks (an IP allow-list).
  | 'unauthorized_client'
  // RFC 6749 §4.1.2.1 names these two for the authorization endpoint; the token endpoint has no
  // words of its own for a failure of the server.
  | 'server_error'
  | 'temporarily_unavailable'

/** The realm every 401 of the endpoint names (RFC 6749 §5.2, RFC 7617). */
export const BASIC_CHALLENGE = 'Basic realm="tenancy-gateway"'

/**
 * RFC 6749 §5.2: error_description is printable ASCII without '"' and '\\'. Descriptions may
 * repeat what the client sent (a grant_type, a parameter's name, a charset): anything else
 * becomes '?'.
 */
export function describable(text: string): string {
  return text.replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/g, '?')
}

export class OAuthError extends Error {
  readonly description: string

  readonly status: number
  readonly error: OAuthErrorCode
  readonly headers: Record<string, string>
  constructor(status: number, error: OAuthErrorCode, description: string, headers: Record<string, string> = {}) {
    super(description)
    this.status = status
    this.error = error
    this.headers = headers
    this.name = 'OAuthError'
    this.description = describable(description)
  }
}

export const invalidRequest = (description: string) => new OAuthError(400, 'invalid_request', description)

export const invalidScope = (description: string) => new OAuthError(400, 'invalid_scope', description)

/**
 * One answer for every failed client authentication: unknown key, wrong secret, revoked or
 * expired key, deactivated sub-account, key without a secret. A caller learns nothing of which.
 */
export const invalidClient = (description = 'client authentication failed') =>
  new OAuthError(401, 'invalid_client', description, { 'www-authenticate': BASIC_CHALLENGE })

/** The answer's headers on every outcome: a token or an error is never kept by a cache (RFC 6749 §5.1). */
export function noStore(reply: FastifyReply): FastifyReply {
  return reply.header('cache-control', 'no-store').header('pragma', 'no-cache')
}

/** Any error of the endpoint as RFC 6749 JSON: catalogue errors keep their meaning, not their shape. */
function toOAuthError(err: FastifyError, request: FastifyRequest): OAuthError {
  if (err instanceof OAuthError) return err
  const apiError = toApiError(err, request)
  if (apiError === null) {
    request.log.error({ err }, 'unhandled error')
    return new OAuthError(500, 'server_error', 'the gateway could not complete this request')
  }
  if (apiError.code === 'store_unavailable' || apiError.code === 'not_ready') {
    request.log.error({ err }, apiError.code)
    return new OAuthError(503, 'temporarily_unavailable', apiError.detail, { 'retry-after': '1' })
  }
  if (apiError.status >= 500) {
    request.log.error({ err }, apiError.code)
    return new OAuthError(500, 'server_error', 'the gateway could not complete this request')
  }
  // A body that came too slowly keeps its 408 (and its Connection: close): the client may retry;
  // too many headers keep their 431, as on every route. Every other refusal of the request itself
  // is RFC 6749's 400 invalid_request.
  const status = apiError.code === 'request_timeout' || apiError.code === 'headers_too_large' ? apiError.status : 400
  return new OAuthError(status, 'invalid_request', apiError.detail, apiError.options.headers)
}

/** The endpoint's error handler (set on its own scope, so the gateway's problem+json one never sees these). */
export function sendOAuthError(err: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const error = toOAuthError(err, request)
  return noStore(reply)
    .code(error.status)
    .headers(error.headers)
    .type('application/json; charset=utf-8')
    .send({ error: error.error, error_description: error.description })
}
