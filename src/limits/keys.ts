// The limiter's names in Redis. Each lease script touches a limit's key and the incarnation key
// (scripts.ts), so the two share a hash tag: one slot on a cluster, where a script may not touch
// keys of two slots. A tag per limit would need an incarnation key per limit, which nothing would
// ever delete; instead every limit falls in one of LIMIT_GROUPS groups, each with its own
// incarnation (docs/decisions/0233-limits-in-16-slots.md).

/** How many hash tags (so at most how many slots, and how many incarnation keys) limits use. */
export const LIMIT_GROUPS = 16

/** The group of a limit's subject (`<level>:<tenant id>`): a stable hash, the same on every replica. */
function groupOf(subject: string): string {
  let hash = 0
  for (let i = 0; i < subject.length; i++) hash = (hash * 31 + subject.charCodeAt(i)) >>> 0
  return `l${hash % LIMIT_GROUPS}`
}

/** A route meter's limits are keyed apart, in their tenant's group; the request units' as before. */
const meterPart = (meter: string) => (meter === 'requests' ? '' : `:m:${meter}`)
/** A shadow limit counts apart from an enforced one of the same kind beside it. */
const shadowPart = (shadow: boolean) => (shadow ? ':s' : '')

export const limitKeys = {
  /** A rate's bucket and leases; `meter`: a route meter's (none: the request units'). */
  rate: (prefix: string, subject: string, meter = 'requests', shadow = false) =>
    `${prefix}limits:{${groupOf(subject)}}:rate:${subject}${shadowPart(shadow)}${meterPart(meter)}`,
  /** A quota's month. */
  quota: (prefix: string, subject: string, month: string, meter = 'requests', shadow = false) =>
    `${prefix}limits:{${groupOf(subject)}}:quota:${subject}${shadowPart(shadow)}${meterPart(meter)}:${month}`,
  /** A sub-account's credits of a meter: counted as a quota's month is, read again each month. */
  credit: (prefix: string, subject: string, meter: string, month: string) =>
    `${prefix}limits:{${groupOf(subject)}}:credit:${subject}:${meter}:${month}`,
  /**
   * The last report a replica made of a quota's month (scripts.ts, QUOTA_LEASE): the month's key
   * and more, so in its slot.
   */
  reportOf: (quotaKey: string, replica: string) => `${quotaKey}:report:${replica}`,
  /** The incarnation of the group a limit's key is in. */
  incarnationOf(prefix: string, key: string): string {
    const tag = /\{(l\d+)\}/.exec(key.slice(prefix.length))
    if (tag === null) throw new Error(`not a limit's key: ${key}`)
    return `${prefix}limits:{${tag[1]}}:incarnation`
  },
  /** Every group's incarnation key. */
  incarnations: (prefix: string): string[] =>
    Array.from({ length: LIMIT_GROUPS }, (_, i) => `${prefix}limits:{l${i}}:incarnation`),
}
