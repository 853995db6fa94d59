// An upstream's own RateLimit fields beside the gateway's (docs/api.md, limits and quotas): on an
// answer that carries the gateway's RateLimit and RateLimit-Policy, an upstream's members of the
// same fields come after the gateway's, never in their place, so that a client reading the first
// member sees the gateway's limit; a member named as one of the gateway's policies is dropped (it
// would tell another count under the same name). Both fields are Structured Field lists
// (draft-ietf-httpapi-ratelimit-headers, RFC 9651 §3.1), read and written with structured-headers.
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import { type List, parseList, serializeList, Token } from 'structured-headers'

/** The fields the gateway sets (answer.ts), lower-case as Node and undici give them. */
export const RATELIMIT_FIELDS = ['ratelimit', 'ratelimit-policy'] as const

/** A member's name: its item's string or token; null for an inner list or another kind of item. */
function memberName(member: List[number]): string | null {
  const value = member[0]
  if (typeof value === 'string') return value
  return value instanceof Token ? value.toString() : null
}

/** A field's value as a list, its repeats joined (RFC 9110 §5.3); null when it is not one. */
function listOf(value: string | string[] | number): List | null {
  try {
    return parseList(Array.isArray(value) ? value.join(', ') : String(value))
  } catch {
    return null
  }
}

/**
 * The RateLimit and RateLimit-Policy a client gets, by field, when the upstream sent either: the
 * gateway's members (in `gateway`, the reply's headers) first, then the upstream's, less those
 * named as a policy of the gateway's (its RateLimit-Policy). On an answer without the gateway's
 * fields (a route without limits) the upstream's pass as sent. A field of the upstream's that is
 * no valid list is dropped: joined to the gateway's, it would make the whole field unreadable.
 */
export function mergedRateLimitFields(
  gateway: OutgoingHttpHeaders,
  upstream: IncomingHttpHeaders,
): Partial<Record<(typeof RATELIMIT_FIELDS)[number], string | string[] | number>> {
  const merged: Partial<Record<(typeof RATELIMIT_FIELDS)[number], string | string[] | number>> = {}
  const policies = new Set<string>()
  for (const member of listOf((gateway['ratelimit-policy'] as string | undefined) ?? '') ?? []) {
    const name = memberName(member)
    if (name !== null) policies.add(name)
  }
  for (const field of RATELIMIT_FIELDS) {
    const theirs = upstream[field]
    if (theirs === undefined) continue
    const ours = gateway[field] as string | number | undefined
    if (ours === undefined) {
      merged[field] = theirs
      continue
    }
    const kept = (listOf(theirs) ?? []).filter((member) => {
      const name = memberName(member)
      return name === null || !policies.has(name)
    })
    merged[field] = kept.length === 0 ? ours : `${ours}, ${serializeList(kept)}`
  }
  return merged
}
