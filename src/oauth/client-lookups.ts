// The token endpoint's lookups of a client id in Postgres, coalesced and paced as the proxy's key
// lookups are (store/key-lookup-batcher.ts,
// docs/decisions/0021-client-ids-share-paced-queries-as-key-digests-do.md). A client_id is a UUID,
// which anyone can make up: one query per token request would let a flood of random ids drive
// Postgres at the flood's rate (764 requests a second were 682 transactions a second). Here the ids
// waiting for Postgres go out together in one query, at most about 200 queries a second per
// replica.
import type { Sql } from '../store/db.js'
import { DEFAULT_KEY_BATCH_PACING, type KeyBatchPacing, KeyLookupBatcher } from '../store/key-lookup-batcher.js'
import { type ClientCredential, findClientCredentials } from '../store/api-keys.js'

export interface ClientLookupOptions {
  /** How long one lookup may wait for its answer, its turn included (then 503). */
  deadlineMs: number
  pacing?: Partial<KeyBatchPacing>
  /** Called as each query starts, with how many ids it asks for (the metrics). */
  onQuery?: (ids: number) => void
}

/** A UUID as its 16 bytes: the batcher keys its waiting lookups by bytes. */
const uuidBytes = (id: string): Buffer => Buffer.from(id.replaceAll('-', ''), 'hex')

function uuidText(bytes: Buffer): string {
  const hex = bytes.toString('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

export class ClientLookups {
  private readonly batcher: KeyLookupBatcher<ClientCredential>

  private readonly options: ClientLookupOptions
  constructor(sql: Sql, options: ClientLookupOptions) {
    this.options = options
    this.batcher = new KeyLookupBatcher<ClientCredential>(
      async (ids) =>
        (await findClientCredentials(sql, ids.map(uuidText))).map((row) => ({ keyDigest: uuidBytes(row.id), row })),
      {
        pacing: { ...DEFAULT_KEY_BATCH_PACING, queryDeadlineMs: options.deadlineMs, ...options.pacing },
        ...(options.onQuery === undefined ? {} : { onQuery: options.onQuery }),
      },
    )
  }

  /** The key with this id (a UUID, in any case) and what the token endpoint checks of it, or null. */
  find(id: string): Promise<ClientCredential | null> {
    return this.batcher.lookup(uuidBytes(id), this.options.deadlineMs)
  }
}
