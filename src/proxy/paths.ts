// Paths the gateway refuses before any routing (docs/api.md): traversal and the encodings that
// smuggle it past a prefix match, doubled slashes, and `;` path parameters that some servers
// strip and others keep. Checked on the raw path, before anything decodes it.
import { MANAGEMENT_PREFIX } from '../management/routes.js'

// `..` in any mix of plain and encoded dots, encoded `/` and `\`, a plain `\`, `//`, `;`, and
// `#`: a fragment is never part of a request target, and the router would ignore it while the
// reserved-path check saw a different path.
// Also a lone `.` segment, plain or encoded: the router keeps it, but the upstream URL is built
// with WHATWG URL, which drops it, so `/v1/./shipments` would reach /v1/shipments unmatched by
// that route's prefix (and its scopes), and `/v1/%2e/sub-accounts` the management path.
const BAD_PATH = /\.\.|%2e%2e|%2e\.|\.%2e|%2f|%5c|\\|\/\/|;|#|\/(\.|%2e)(\/|$)/i

/** The path part of a request target, without its query string. */
export function pathOf(url: string): string {
  const query = url.indexOf('?')
  return query === -1 ? url : url.slice(0, query)
}

/** Also any target that is not a path (`*`, an absolute URI): the upstream would get `/*`. */
export function isBadPath(path: string): boolean {
  return !path.startsWith('/') || BAD_PATH.test(path)
}

/**
 * Paths the gateway answers itself: never proxied, and no route may take them
 * (docs/configuration.md, docs/operations.md).
 */
export const RESERVED_PREFIXES = [MANAGEMENT_PREFIX, '/healthz', '/readyz', '/openapi.json', '/docs'] as const

/**
 * True for a reserved prefix and anything below it, compared decoded and case-insensitively, so
 * that no spelling of a management, health or docs path reaches an upstream (a catch-all route
 * would otherwise take `POST /healthz` or `/docs/x`).
 */
export function isReservedPath(path: string): boolean {
  let decoded = path
  if (path.includes('%')) {
    try {
      decoded = decodeURIComponent(path)
    } catch {
      return false
    }
  }
  decoded = decoded.toLowerCase()
  for (const reserved of RESERVED_PREFIXES) {
    if (decoded.startsWith(reserved) && (decoded.length === reserved.length || decoded[reserved.length] === '/'))
      return true
  }
  return false
}
