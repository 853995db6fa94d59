// The count of the headers that must come once (Host, Authorization, the acting header), shared
// by the request guards (http/guards.ts: one Host) and the tenancy check (tenancy/hook.ts).
import type { FastifyRequest } from 'fastify'
import { ACTING_HEADER } from '../tenancy/acting.js'

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
}

const AUTHORIZATION = 'authorization'

/**
 * How many times each header that must come once was sent, in one pass over the raw headers:
 * Node keeps the first Host and Authorization and folds repeated custom headers into one value.
 * Counted once per request (the Host guard and the tenancy check both read it).
 */
export function singleHeaderCounts(request: FastifyRequest): SingleHeaderCounts {
  if (request.singleHeaders !== null) return request.singleHeaders
  const raw = request.raw.rawHeaders
  const counts = { host: 0, authorization: 0, acting: 0 }
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    // Lower-cased only when the length matches: this runs for every header of every request.
    if (name.length === 4 && name.toLowerCase() === 'host') counts.host++
    else if (name.length === AUTHORIZATION.length && name.toLowerCase() === AUTHORIZATION) counts.authorization++
    else if (name.length === ACTING_HEADER.length && name.toLowerCase() === ACTING_HEADER) counts.acting++
  }
  request.singleHeaders = counts
  return counts
}
