// Paths the gateway refuses before any routing (docs/api.md): traversal and the encodings that
// smuggle it past a prefix match, doubled slashes, and `;` path parameters that some servers
// strip and others keep. Checked on the raw path, before anything decodes it.
// `..` in any mix of plain and encoded dots, encoded `/` and `\`, a plain `\`, `//`, `;` plain or
// encoded (`%3b`: an upstream that decodes before it splits path parameters off reads `;`), and
// `#` plain or encoded: a fragment is never part of a request target, and the router would ignore
// it while the reserved-path check saw a different path.
// Also a lone `.` segment, plain or encoded: the router keeps it, but the upstream URL is built
// with WHATWG URL, which drops it, so `/v1/./shipments` would reach /v1/shipments unmatched by
// that route's prefix (and its scopes), and `/v1/%2e/sub-accounts` the management path.
// And a control character, percent-encoded (`%00`–`%1f`, `%7f`) or raw (Node's parser refuses raw
// ones, app.inject does not): upstreams cut a path at `%00` or split it at `%0a`.
const BAD_PATH =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: it finds control characters to refuse them
  /\.\.|%2e%2e|%2e\.|\.%2e|%2f|%5c|%3b|%23|\\|\/\/|;|#|\/(\.|%2e)(\/|$)|%[01][0-9a-f]|%7f|[\u0000-\u001f\u007f]/i

/** The path part of a request target, without its query string. */
export function pathOf(url: string): string {
  const query = url.indexOf('?')
  return query === -1 ? url : url.slice(0, query)
}

/**
 * Also any target that is not a path (`*`, an absolute URI): the upstream would get `/*`. The
 * rules hold for the path as sent and as decoded once and twice, because some upstreams (and the
 * frameworks in front of them) decode a path again: `%252e%252e` and `%252f` are `%2e%2e` and `%2f`
 * to them.
 */
export function isBadPath(path: string): boolean {
  if (!path.startsWith('/') || BAD_PATH.test(path)) return true
  let decoded = path
  for (let round = 0; round < 2 && decoded.includes('%'); round++) {
    try {
      decoded = decodeURIComponent(decoded)
    } catch {
      // A broken encoding: the router answers 400 bad_request for it.
      return false
    }
    if (BAD_PATH.test(decoded)) return true
  }
  return false
}
