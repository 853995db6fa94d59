// The portal's lookups of its credentials in Postgres, coalesced and paced as the proxy's key
// lookups are (store/key-lookup-batcher.ts,
// docs/decisions/0189-portal-credentials-are-looked-up-like-keys-grouped.md). A session credential
// (`tgwps_`, as a bearer or the cookie) and a link's token (`tgwpl_`) carry a public checksum, so a
// made-up one costs nothing to send: one query each would let a flood drive Postgres at its own
// rate (1,274 forged bearers were 1,279 transactions in 5 s). Here the digests waiting for Postgres
// go out together, one query a batch, at most about 200 queries a second per replica for each kind
// (STORE_DEADLINES.lookupIntervalMs), and a lookup with nothing ahead of it starts at once. Each
// answer comes from a query started after the lookup was asked: a session ended or expired is
// refused at once, as before.
import type { Sql } from '../store/db.js'
import type { StoreDeadlines } from '../store/deadlines.js'
import { DEFAULT_KEY_BATCH_PACING, KeyLookupBatcher } from '../store/key-lookup-batcher.js'
import {
  openSessionsBySecrets,
  type PortalSessionRow,
  type UsableLink,
  usableLinksByTokens,
} from '../store/portal-sessions.js'
import { storedPortalOrigins } from './origin-changes.js'

/** What the lookups count (cache/metrics.ts): each query sent, and the credentials they asked for. */
export interface PortalLookupCounts {
  query(): void
  credentials(n: number): void
}

/** A link that can still be exchanged, with the origins its parent lets embed the portal (checked ones only). */
export interface PortalLink {
  sessionId: string
  accountId: string
  /** null: the parent lets no site embed the portal. */
  portalOrigins: string[] | null
}

const BUSY = 'the portal session could not be looked up in time; try again'

export class PortalCredentialLookups {
  private readonly sessions: KeyLookupBatcher<PortalSessionRow>
  private readonly links: KeyLookupBatcher<UsableLink>
  private readonly deadlineMs: number

  /** Each lookup waits `lookupMs` at most, its turn included (then 503), as a key's does. */
  constructor(sql: Sql, counts: PortalLookupCounts, deadlines: Pick<StoreDeadlines, 'lookupMs' | 'lookupIntervalMs'>) {
    const deadlineMs = deadlines.lookupMs
    this.deadlineMs = deadlineMs
    const batching = {
      pacing: { ...DEFAULT_KEY_BATCH_PACING, queryDeadlineMs: deadlineMs, intervalMs: deadlines.lookupIntervalMs },
      busyDetail: BUSY,
      onQuery: (n: number) => {
        counts.query()
        counts.credentials(n)
      },
    }
    this.sessions = new KeyLookupBatcher<PortalSessionRow>(async (digests) => {
      const rows = await openSessionsBySecrets(sql, digests)
      return rows.map(({ secret_digest, ...row }) => ({ keyDigest: secret_digest, row }))
    }, batching)
    this.links = new KeyLookupBatcher<UsableLink>(
      async (digests) => (await usableLinksByTokens(sql, digests)).map((row) => ({ keyDigest: row.token_digest, row })),
      batching,
    )
  }

  /** The open session whose credential has this digest (sub-account active), or null. */
  session(secretDigest: Buffer): Promise<PortalSessionRow | null> {
    return this.sessions.lookup(secretDigest, this.deadlineMs)
  }

  /** The link with this token digest if it can still be exchanged, or null. */
  async link(tokenDigest: Buffer): Promise<PortalLink | null> {
    const row = await this.links.lookup(tokenDigest, this.deadlineMs)
    if (row === null) return null
    return {
      sessionId: row.session_id,
      accountId: row.account_id,
      portalOrigins: storedPortalOrigins(row.portal_origins),
    }
  }
}
