// How many key imports a replica runs at once (docs/key-imports.md; decision 0386): each holds,
// while its body is read, a set of every digest the body gives (about 7 MiB at 100,000 lines) and
// a spool of up to 80 MiB on the temporary directory. The image's heap has about 50 MiB to spare
// past its live set, so without a bound a parent sending eight imports at once, within its
// management rate, runs the replica out of heap for every parent on it. Refused imports wait for
// nothing and read nothing: they are answered at once, the connection closed.
import { SpoolBudget } from '../auth/key-import-spool.js'
import { ApiError } from '../errors.js'

/** One parent's imports under way at once on a replica. */
export const KEY_IMPORTS_PER_ACCOUNT = 2
/** Imports under way at once on a replica, all parents together. */
export const KEY_IMPORTS_AT_ONCE = 4

/**
 * How long an import's answer waits for its client to read on: a client that stops reading would
 * hold its place, its spool and a batch for as long as its connection lasts (Node times out no
 * answer), and four such clients every import of the replica. Past it the connection is closed.
 * 30 s between two batches of 500 lines (about 35 KB) asks of a reader at least about 1 KB/s.
 */
export const KEY_IMPORT_ANSWER_STALL_MS = 30_000

/** The bytes the replica's spools hold together at most: under the chart's 128Mi `tmpDir.sizeLimit`. */
export const KEY_IMPORT_SPOOL_BYTES = 120 * 1024 * 1024

/** Leaves the place taken; a second call does nothing. */
export type LeavePlace = () => void

/** The places of key imports on this replica: a count per parent, dropped when it reaches zero. */
export class KeyImportPlaces {
  private readonly byAccount = new Map<string, number>()
  private total = 0

  private readonly perAccount: number
  private readonly atOnce: number
  /** See KEY_IMPORT_ANSWER_STALL_MS. */
  readonly answerStallMs: number
  /** What the imports' spools may hold together (KEY_IMPORT_SPOOL_BYTES). */
  readonly spoolBudget: SpoolBudget

  constructor(
    options: {
      perAccount?: number
      atOnce?: number
      answerStallMs?: number | undefined
      spoolBytes?: number | undefined
    } = {},
  ) {
    this.perAccount = options.perAccount ?? KEY_IMPORTS_PER_ACCOUNT
    this.atOnce = options.atOnce ?? KEY_IMPORTS_AT_ONCE
    this.answerStallMs = options.answerStallMs ?? KEY_IMPORT_ANSWER_STALL_MS
    this.spoolBudget = new SpoolBudget(options.spoolBytes ?? KEY_IMPORT_SPOOL_BYTES)
  }

  /** Takes a place for `accountId`'s import, or throws `429 too_many_concurrent_requests`. */
  enter(accountId: string): LeavePlace {
    const held = this.byAccount.get(accountId) ?? 0
    if (held >= this.perAccount) throw tooMany(`this account already has ${this.perAccount} key imports under way`)
    if (this.total >= this.atOnce) throw tooMany(`this replica already runs ${this.atOnce} key imports`)
    this.byAccount.set(accountId, held + 1)
    this.total++
    let left = false
    return () => {
      if (left) return
      left = true
      this.total--
      const now = this.byAccount.get(accountId)! - 1
      if (now === 0) this.byAccount.delete(accountId)
      else this.byAccount.set(accountId, now)
    }
  }

  /** Imports under way, all parents together (tests, metrics). */
  get size(): number {
    return this.total
  }
}

const tooMany = (why: string) =>
  new ApiError('too_many_concurrent_requests', `${why}: retry once one has answered; nothing was imported`, {
    headers: { 'retry-after': '1', connection: 'close' },
  })
