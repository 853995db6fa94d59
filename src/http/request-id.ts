// A request's id (docs/api.md, Headers): the client's X-Request-Id when it is a sane token that is
// not a credential, so that logs can be joined across hops; else one the gateway makes. The id is
// stored in the request log, sent upstream and echoed on the answer: a key sent here by mistake
// (or to plant it in a log) must not become any of those (docs/api.md#headers).
import { randomUUID } from 'node:crypto'

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/**
 * The gateway's own credentials, any case, anywhere in the id (`key:tgw_…` too): API keys `tgw_`,
 * client secrets `tgws_` (auth/key-format.ts), portal links `tgwpl_` and sessions `tgwps_`
 * (auth/portal-credentials.ts), and any later `tgw…_`.
 */
const GATEWAY_CREDENTIAL = /tgw[a-z]{0,2}_/i

/**
 * A JWT (an access token, a signed identity) or a part of one: a JOSE header is JSON, so its
 * base64url holds `eyJ` (a random id rarely does, and then merely gets one of the gateway's); or
 * the compact form's three (JWS) or five (JWE) base64url parts between dots.
 */
const JWT_LIKE = /eyJ|^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)?$/

/** Whether the client's X-Request-Id may be the request's id. */
export function isUsableRequestId(given: string): boolean {
  return SANE_REQUEST_ID.test(given) && !GATEWAY_CREDENTIAL.test(given) && !JWT_LIKE.test(given)
}

/**
 * A generated id: a random UUID drawn once per process, whose last 12 hex digits count the
 * process's requests. As unique across replicas and restarts as random ones (74 random bits each)
 * and in the same shape, for a fraction of randomUUID's cost on every request.
 */
const PROCESS_ID_STEM = randomUUID().slice(0, 24)
let generated = 0

function nextRequestId(): string {
  generated = (generated + 1) % 2 ** 48
  return PROCESS_ID_STEM + generated.toString(16).padStart(12, '0')
}

/** fastify's genReqId: the client's X-Request-Id when usable, else a new one. */
export function requestId(req: { headers: Record<string, string | string[] | undefined> }): string {
  const given = req.headers['x-request-id']
  return typeof given === 'string' && isUsableRequestId(given) ? given : nextRequestId()
}
