// One pass over a request's raw headers: how many fields and bytes they are (past 100 fields or
// 16 KiB the request is refused, http/guards.ts), and the count of the headers that must come
// once (Host, Authorization, the acting header), shared by the guards (one Host) and the tenancy
// check (tenancy/hook.ts).
import type { FastifyRequest } from 'fastify'
import { ACTING_HEADER } from '../shared/header-names.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by singleHeaderCounts, the first time it is asked. */
    singleHeaders: SingleHeaderCounts | null
  }
}

export interface SingleHeaderCounts {
  host: number
  authorization: number
  acting: number
  /** Header fields in all, repeats included. */
  fields: number
  /** Their size as sent: name, `: `, value and CRLF of each. */
  bytes: number
}

/** At most this many header fields… */
export const MAX_HEADER_FIELDS = 100
/** …and this many bytes of them (Node's own limit on a request head, line included, is the same). */
export const MAX_HEADER_BYTES = 16 * 1024
/** What a client told 431 headers_too_large should do, whichever limit it met (http/parser-refusal.ts too). */
export const HEADERS_TOO_LARGE = `the request has more than ${MAX_HEADER_FIELDS} header fields or ${MAX_HEADER_BYTES / 1024} KiB of them; send fewer or smaller headers`

const AUTHORIZATION = 'authorization'

/**
 * The fields and bytes of the headers, and how many times each header that must come once was
 * sent, in one pass over the raw headers:
 * Node keeps the first Host and Authorization and folds repeated custom headers into one value.
 * Counted once per request (the Host guard and the tenancy check both read it).
 */
export function singleHeaderCounts(request: FastifyRequest): SingleHeaderCounts {
  if (request.singleHeaders !== null) return request.singleHeaders
  const raw = request.raw.rawHeaders
  const counts = { host: 0, authorization: 0, acting: 0, fields: raw.length / 2, bytes: 0 }
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    counts.bytes += name.length + raw[i + 1]!.length + 4
    // Lower-cased only when the length matches: this runs for every header of every request.
    if (name.length === 4 && name.toLowerCase() === 'host') counts.host++
    else if (name.length === AUTHORIZATION.length && name.toLowerCase() === AUTHORIZATION) counts.authorization++
    else if (name.length === ACTING_HEADER.length && name.toLowerCase() === ACTING_HEADER) counts.acting++
  }
  request.singleHeaders = counts
  return counts
}
