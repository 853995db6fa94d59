// How many request headers the gateway takes (docs/api.md): 100 fields, 16 KiB of them. Past
// that the request is 431 headers_too_large, before routing, on every route. The reason is the
// upstream's own limit: a client that sends enough filler pushes headers past it, and an upstream
// that drops what is past its limit (Node keeps 2,000 fields, 16 KiB) would lose the trusted
// X-Service-* headers of an authenticated request (issue 28, finding 2). The trusted headers are
// also written first (proxy/headers.ts); this bound keeps what follows them small.
import { ApiError } from '../errors.js'
import type { HeaderCounts } from './header-counts.js'

export const MAX_HEADER_FIELDS = 100
export const MAX_HEADER_BYTES = 16 * 1024

/**
 * The one text of a 431, whether the guard counted the headers or Node's HTTP parser refused the
 * head (http/parser-refusal.ts): its 16 KiB also hold the request target.
 */
export const HEADERS_TOO_LARGE_DETAIL =
  'a request may send at most 100 header fields and 16 KiB of headers, its target included: send fewer or shorter headers and put large data in the body'

/** 431 headers_too_large past either limit; null within both. */
export function headersTooLarge(counts: HeaderCounts): ApiError | null {
  return counts.fields > MAX_HEADER_FIELDS || counts.bytes > MAX_HEADER_BYTES
    ? new ApiError('headers_too_large', HEADERS_TOO_LARGE_DETAIL)
    : null
}
