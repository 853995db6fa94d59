// Paths that a configured prefix "shadows" (docs/api.md, Proxied requests): the router matches
// prefixes exactly, case and all, but many upstreams fold case, decode, or trim trailing dots and
// spaces of a segment (Windows and IIS among them). `/v1/Shipments/x` or `/v1/shipments./x` would
// then fall through to a shorter route (a catch-all, whose scopes may be weaker) while the upstream
// serves it as /v1/shipments/x. Such a path is refused as 404 route_not_found.
//
// On the proxy's hot path: everything that depends on the route table alone is computed once, a
// route with no longer prefix above it checks nothing, and a path is folded only segment by
// segment for as long as it can still lead to a longer configured prefix.

// Anything outside ASCII.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the range starts at NUL on purpose
const NON_ASCII = /[^\u0000-\u007f]/
// What a trimming upstream drops at a segment's end: dots, any Unicode space (U+0085, U+1680,
// U+2028, U+3000…), not only the ASCII one, and the default-ignorable code points that case
// folding deletes (U+00AD, U+180E, U+200B–U+200F, U+2060, U+FEFF…).
const TRAILING_DOTS_AND_SPACES = /[.\p{White_Space}\p{Default_Ignorable_Code_Point}]+$/u
// A path of these alone folds to itself (no case, no encoding, no dot or space to trim): the
// common case on the hot path, compared without building a folded copy.
const UNFOLDED = /^[a-z0-9/_~!$&'()*+,;=:@-]*$/

/**
 * A segment as a folding upstream may read it: decoded (twice: some decode a path again), its
 * compatibility forms and the letters whose case folds into ASCII taken as those ASCII letters
 * (fullwidth `ｓ`, long `ſ`, dotless `ı`, the Kelvin sign: Python's casefold, Java's
 * equalsIgnoreCase, Go's EqualFold and Windows' best-fit mapping read them so), lower case, and
 * without trailing `.` and spaces (once the segment is not ASCII, any Unicode space or
 * default-ignorable code point too).
 */
export function foldSegment(segment: string): string {
  let folded = segment
  for (let round = 0; round < 2 && folded.includes('%'); round++) {
    try {
      folded = decodeURIComponent(folded)
    } catch {
      // A broken encoding is refused by the router (400 bad_request); compare it as it is.
      break
    }
  }
  if (NON_ASCII.test(folded)) {
    return folded.normalize('NFKC').toUpperCase().toLowerCase().replace(TRAILING_DOTS_AND_SPACES, '')
  }
  folded = folded.toLowerCase()
  let end = folded.length
  while (end > 0 && (folded.charCodeAt(end - 1) === 0x2e || folded.charCodeAt(end - 1) === 0x20)) end -= 1
  return end === folded.length ? folded : folded.slice(0, end)
}

/** The prefix's segments, folded and joined again: `/V1/Shipments.` → `/v1/shipments`. */
export function foldPrefix(prefix: string): string {
  return prefix === '/' ? '/' : `/${prefix.split('/').slice(1).map(foldSegment).join('/')}`
}

/** How many segments a prefix has; the catch-all `/` has none. */
export function segmentCount(prefix: string): number {
  return prefix === '/' ? 0 : prefix.split('/').length - 1
}

/**
 * A set of folded prefixes, and a test of whether a path, folded, lies under one of them (on whole
 * segments) at a depth past `fromDepth`.
 */
export class FoldedPrefixes {
  private readonly prefixes = new Set<string>()
  /** Every folded prefix of a member, so that the walk stops as soon as nothing longer can match. */
  private readonly stems = new Set<string>()
  private readonly maxDepth: number

  private readonly fromDepth
  constructor(prefixes: Iterable<string>, fromDepth = 0) {
    this.fromDepth = fromDepth
    let maxDepth = 0
    for (const prefix of prefixes) {
      const folded = foldPrefix(prefix)
      const depth = segmentCount(prefix)
      this.prefixes.add(folded)
      maxDepth = Math.max(maxDepth, depth)
      let stem = ''
      for (const segment of folded.split('/').slice(1)) {
        stem += `/${segment}`
        this.stems.add(stem)
      }
    }
    this.maxDepth = maxDepth
  }

  /** True when `path` (without its query) folds to a member or to something below one. */
  covers(path: string): boolean {
    return UNFOLDED.test(path) ? this.coversAsIs(path) : this.coversFolded(path)
  }

  /** `covers` for a path that folding leaves as it is: its own leading segments are the stems. */
  private coversAsIs(path: string): boolean {
    let end = 0
    for (let depth = 1; depth <= this.maxDepth; depth += 1) {
      end = path.indexOf('/', end + 1)
      if (end === -1) end = path.length
      const stem = path.slice(0, end)
      if (depth > this.fromDepth && this.prefixes.has(stem)) return true
      if (!this.stems.has(stem) || end === path.length) return false
    }
    return false
  }

  private coversFolded(path: string): boolean {
    let folded = ''
    let start = 1
    for (let depth = 1; depth <= this.maxDepth; depth += 1) {
      let end = path.indexOf('/', start)
      if (end === -1) end = path.length
      folded += `/${foldSegment(path.slice(start, end))}`
      if (depth > this.fromDepth && this.prefixes.has(folded)) return true
      if (!this.stems.has(folded) || end === path.length) return false
      start = end + 1
    }
    return false
  }
}

/**
 * For the route whose prefix the router matched, a test of whether a path it was given shadows a
 * longer configured prefix: lies under it once folded, though not exactly (the router would have
 * chosen the longer route then). A route with no longer prefix that could apply gets a test that
 * does nothing.
 */
export function prefixShadowCheck(
  matchedPrefix: string,
  routes: Iterable<string | { readonly prefix: string }>,
): (path: string) => boolean {
  const depth = segmentCount(matchedPrefix)
  const matchedFolded = foldPrefix(matchedPrefix)
  const prefixes = [...routes].map((route) => (typeof route === 'string' ? route : route.prefix))
  const longer = prefixes.filter((prefix) => {
    if (segmentCount(prefix) <= depth) return false
    const folded = foldPrefix(prefix)
    return depth === 0 || folded.startsWith(`${matchedFolded}/`)
  })
  if (longer.length === 0) return () => false
  const shadowed = new FoldedPrefixes(longer, depth)
  return (path) => shadowed.covers(path)
}
