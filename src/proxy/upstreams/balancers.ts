// The three ways a route spreads its requests over its targets (docs/configuration.md, routes:
// `balance`), in Envoy's terms. Each picks among the targets that may take a request now
// (route-upstreams.ts leaves out those ejected or failing their checks), so that a target's
// leaving moves its share, and only its share, to the others.

/** What a balancer reads of a target. */
export interface Balanced {
  readonly weight: number
  /** Requests sent to it whose answers have not ended. */
  readonly inFlight: number
  /** Smooth weighted round robin's running score (RoundRobin alone writes it). */
  current: number
  /** A hash of its URL, mixed with the tenant's for rendezvous hashing. */
  readonly seed: number
}

export interface Balancer {
  /** One of `candidates` (never empty); `tenantId`: the request's resolved tenant, when it has one. */
  pick<T extends Balanced>(candidates: readonly T[], tenantId: string | undefined): T
}

/** One of `candidates` at random, in proportion to weight, `skip` (an index) left out. */
function weightedRandom<T extends Balanced>(candidates: readonly T[], skip: number): number {
  let total = 0
  for (let i = 0; i < candidates.length; i++) if (i !== skip) total += candidates[i]!.weight
  let at = Math.random() * total
  let chosen = -1
  for (let i = 0; i < candidates.length && at >= 0; i++) {
    if (i === skip) continue
    chosen = i
    at -= candidates[i]!.weight
  }
  return chosen
}

/**
 * Power of two choices (Mitzenmacher, 2001; Envoy's LEAST_REQUEST): two different targets drawn in
 * proportion to weight, and the one with fewer requests in flight for its weight. Near the best of
 * a full scan, at the cost of two draws, and without every replica rushing to the same target.
 */
export const leastRequest: Balancer = {
  pick(candidates) {
    if (candidates.length === 1) return candidates[0]!
    const a = candidates[weightedRandom(candidates, -1)]!
    const b = candidates[weightedRandom(candidates, candidates.indexOf(a))]!
    return (b.inFlight + 1) / b.weight < (a.inFlight + 1) / a.weight ? b : a
  },
}

/**
 * Smooth weighted round robin (nginx's, ngx_http_upstream_get_peer): each target's score grows by
 * its weight each pick, the highest is chosen and loses the total. Over a round of the weights'
 * sum, each target gets exactly its weight, spread out rather than in runs.
 */
export function roundRobin(): Balancer {
  return {
    pick(candidates) {
      let total = 0
      let best = candidates[0]!
      for (const target of candidates) {
        target.current += target.weight
        total += target.weight
        if (target.current > best.current) best = target
      }
      best.current -= total
      return best
    },
  }
}

/** FNV-1a, 32 bits: a fast spread of a string's characters, not a secret. */
export function hashString(text: string): number {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash >>> 0
}

/** murmur3's finalizer: two hashes mixed into one that is even over 32 bits. */
function mix(a: number, b: number): number {
  let h = (a ^ Math.imul(b, 0x9e3779b1)) >>> 0
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/**
 * Weighted rendezvous hashing (Thaler and Ravishankar, 1998; weights as Resch's "logarithmic
 * method"): every target scores the tenant, `weight / -ln(u)` with `u` the pair's hash in (0, 1),
 * and the highest serves it. A tenant stays on its target while that one may take requests; when
 * it leaves, only its tenants move (each to its own second best), and they come back with it. No
 * ring to build or rebuild: 64 targets at most make the scan cheap.
 */
export const tenantHash: Balancer = {
  pick(candidates, tenantId) {
    if (candidates.length === 1 || tenantId === undefined) return leastRequest.pick(candidates, tenantId)
    const tenant = hashString(tenantId)
    let best = candidates[0]!
    let bestScore = -1
    for (const target of candidates) {
      const u = (mix(tenant, target.seed) + 0.5) / 4294967296
      const score = target.weight / -Math.log(u)
      if (score > bestScore) {
        best = target
        bestScore = score
      }
    }
    return best
  },
}
