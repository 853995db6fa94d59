// One pass over a request's raw headers, taken before routing and kept on the request: how many
// fields and bytes it sent (http/header-limits.ts refuses past 100 or 16 KiB), and how many times
// each header that must come once was sent (the one-Host guard, the tenancy check, the token
// endpoint's client authentication).
import type { FastifyRequest } from 'fastify'
import { ACTING_HEADER } from '../tenancy/acting.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by countHeaders, the first time it is asked. */
    headerCounts: HeaderCounts | null
  }
}

export interface HeaderCounts {
  /** Header fields received (Node stops keeping them past server.maxHeadersCount: app.ts). */
  fields: number
  /** Their size as sent: `Name: value` and CRLF for each. */
  bytes: number
  host: number
  authorization: number
  acting: number
}

const AUTHORIZATION = 'authorization'
/** `: ` between name and value, CRLF after the value. */
const FIELD_FRAMING_BYTES = 4

/**
 * Counted once per request, in one pass: Node keeps the first Host and Authorization and folds
 * repeated custom headers into one value, so only the raw list tells how many came.
 */
export function countHeaders(request: FastifyRequest): HeaderCounts {
  if (request.headerCounts !== null) return request.headerCounts
  const raw = request.raw.rawHeaders
  const counts = { fields: raw.length / 2, bytes: 0, host: 0, authorization: 0, acting: 0 }
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    // Node decodes header bytes as latin1: a string's length is its size in bytes.
    counts.bytes += name.length + raw[i + 1]!.length + FIELD_FRAMING_BYTES
    // Lower-cased only when the length matches: this runs for every header of every request.
    if (name.length === 4 && name.toLowerCase() === 'host') counts.host++
    else if (name.length === AUTHORIZATION.length && name.toLowerCase() === AUTHORIZATION) counts.authorization++
    else if (name.length === ACTING_HEADER.length && name.toLowerCase() === ACTING_HEADER) counts.acting++
  }
  request.headerCounts = counts
  return counts
}
