// The one way an error leaves the gateway: errors raised by fastify, Ajv, postgres.js or a socket
// are mapped onto the error catalogue (errors.ts), then answered as problem+json (docs/api.md).
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import {
  ApiError,
  contentTypeSent,
  problem,
  PROBLEM_CONTENT_TYPE,
  validationFailed,
  type ErrorCode,
} from '../errors.js'
import { asksForWebSocket, isUpgrade } from './upgrade-request.js'
import { type AjvErrorLike, fieldErrors } from './validation-errors.js'

/** Fastify's own errors, by code, mapped onto the catalogue. */
const FASTIFY_ERRORS: Record<string, ErrorCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bad_request',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_BAD_URL: 'bad_request',
  // A path segment too long to be an id: the id it would name does not exist.
  FST_ERR_MAX_PARAM_LENGTH: 'not_found',
}

// postgres.js and socket errors that mean the database cannot be reached right now.
const STORE_UNREACHABLE = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  '53300', // too_many_connections
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  'QUERY_TIMEOUT', // a lookup past its deadline (withDeadline in store/db.ts)
  '57014', // query_canceled: a statement_timeout (the request log's pages), or an operator's cancel
])

function isStoreUnreachable(code: string): boolean {
  // SQLSTATE class 08: connection exceptions.
  return STORE_UNREACHABLE.has(code) || /^08[0-9A-Z]{3}$/.test(code)
}

/**
 * The request's own body failed because its client closed the connection before sending all of
 * it (Node's `aborted`, code ECONNRESET, as a store's lost connection is too): the client's doing.
 */
function bodyCutShort(err: FastifyError, request: FastifyRequest): boolean {
  return err.code === 'ECONNRESET' && (request.raw.errored === err || request.raw.aborted)
}

/** The catalogue's error for any error thrown on a request; null for a bug (answered 500). */
export function toApiError(err: FastifyError, request: FastifyRequest): ApiError | null {
  if (err instanceof ApiError) return err
  if (bodyCutShort(err, request)) {
    // Not the store's failure nor the gateway's: a client abort, answered (if anyone still
    // listens) and counted as the client error it is.
    request.log.info({ method: request.method, path: request.url.split('?', 1)[0]!.slice(0, 200) }, 'client abort')
    return new ApiError('bad_request', 'the connection closed before the whole request body came; send it again')
  }
  if (err.code && isStoreUnreachable(err.code))
    return new ApiError('store_unavailable', 'the store cannot be reached; try again')
  if (err.validation)
    return validationFailed(fieldErrors(err.validationContext ?? 'body', err.validation as AjvErrorLike[]))
  // A Content-Type that is no media type (`json`): fastify's message names none.
  if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE')
    return new ApiError(
      'unsupported_media_type',
      `the body came with ${contentTypeSent(request.headers['content-type'])}, which is not a media type (type/subtype, as application/json)`,
    )
  const code = err.code ? FASTIFY_ERRORS[err.code] : undefined
  if (code) return new ApiError(code, err.message)
  // Any other client error fastify raises (a bad header, say) keeps its status class.
  if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
    return new ApiError('bad_request', err.message)
  }
  return null
}

/** The error handler: problem+json, and no internals on a 5xx. */
export function sendError(err: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  // A refused upgrade's connection ends with its answer, and the answer says so: http-proxy
  // destroys every socket Node handed it as an upgrade; without a route that carries WebSockets,
  // Node hands none, and the header itself closes the connection.
  if (isUpgrade(request.raw) || asksForWebSocket(request.headers.upgrade)) reply.header('connection', 'close')
  const apiError = toApiError(err, request)
  if (apiError === null) {
    request.log.error({ err }, 'unhandled error')
    reply.problemCode = 'internal_error'
    request.trace?.refused('internal_error')
    return reply
      .code(500)
      .type(PROBLEM_CONTENT_TYPE)
      .send(problem('internal_error', 'the gateway could not complete this request', request.id))
  }
  // A busy upstream is the limit doing its work (proxy/concurrency.ts), not a fault.
  if (apiError.status >= 500 && apiError.code !== 'upstream_busy') {
    const log = apiError.options.log
    request.log.error({ err, code: apiError.code, ...log?.fields }, log?.message ?? apiError.code)
  }
  if (apiError.options.headers) reply.headers(apiError.options.headers)
  reply.problemCode = apiError.code
  request.trace?.refused(apiError.code, apiError.options.extensions?.violated_policies)
  return reply
    .code(apiError.status)
    .type(PROBLEM_CONTENT_TYPE)
    .send({
      ...problem(apiError.code, apiError.detail, request.id, apiError.options.errors),
      ...apiError.options.extensions,
    })
}

/**
 * Errors the router raises before any route runs (a bad percent-encoding, an overlong segment)
 * take the same way out as every other error.
 */
export function sendFrameworkError(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  // No route matched yet, so the request guards' onRequest hook did not run for this reply.
  reply.header('x-request-id', request.id)
  sendError(err, request, reply)
}
