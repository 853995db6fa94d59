// Leaked keys (docs/secret-scanning.md): tokens reported found in public (by GitHub's secret
// scanning, or by the parent itself) looked up by their SHA-256, as authentication finds a key;
// each live key of ours gets its account's leak_policy at once, revoked through the revocation
// path every replica hears (its cache entries invalidated), or only marked, with an api_key.leaked
// event either way. A token that is a key of ours, live or not, is a true positive.
import type { CacheInvalidator } from '../cache/index.js'
import { keyEntries } from '../cache/index.js'
import type { Origin } from '../events/record.js'
import { eventId } from '../events/ulid.js'
import type { Sql } from '../store/db.js'
import { knownDigests, type MarkedLeak, markLeaks, type ReportedLeak } from '../store/key-leaks.js'
import { digest } from './key-format.js'

/** One token of a report: its value, and where it was found. */
export interface LeakReport {
  token: string
  url: string | null
}

export interface LeakRun {
  sql: Sql
  cache: CacheInvalidator
  origin: Origin
  /** Who reported: `github`, or `parent`. */
  source: string
  /** Per report, where its reporter found it (GitHub's `source`: `commit`, `content`…), else `source`. */
  sources?: readonly (string | null)[]
  /** Only keys of this account (a parent's own report); null: any account's. */
  accountId: string | null
}

/** What a report came to: per token, whether it is a key of ours; the keys marked now. */
export interface LeakOutcome {
  known: boolean[]
  marked: MarkedLeak[]
}

/** How many tokens go to Postgres in one statement. */
const LEAK_BATCH = 1000

export async function reportLeaks(run: LeakRun, reports: readonly LeakReport[]): Promise<LeakOutcome> {
  const digests = reports.map((r) => digest(r.token))
  const known: boolean[] = []
  const marked: MarkedLeak[] = []
  for (let from = 0; from < reports.length; from += LEAK_BATCH) {
    const batch = digests.slice(from, from + LEAK_BATCH)
    const found = await knownDigests(run.sql, batch)
    // One leak per key: the first report of a token in the batch names its place.
    const leaks = new Map<string, ReportedLeak>()
    batch.forEach((d, i) => {
      const hex = d.toString('hex')
      known.push(found.has(hex))
      if (found.has(hex) && !leaks.has(hex))
        leaks.set(hex, {
          key_digest: hex,
          url: reports[from + i]!.url,
          source: run.sources?.[from + i] ?? run.source,
          event_id: eventId(),
        })
    })
    if (leaks.size === 0) continue
    const { actor, requestId, sourceIp } = run.origin
    const rows = await markLeaks(run.sql, [...leaks.values()], { actor, requestId, sourceIp }, run.accountId)
    marked.push(...rows)
    // Committed: every replica refuses a revoked key within about a second.
    const revoked = rows.filter((r) => r.action === 'revoke')
    if (revoked.length > 0)
      await run.cache.invalidate(revoked.flatMap((r) => keyEntries({ id: r.id, keyDigest: r.key_digest })))
  }
  return { known, marked }
}
