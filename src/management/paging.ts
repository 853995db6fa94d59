// Opaque keyset cursors (docs/api.md, Paging): the position of the last row of a page, signed
// with the deployment's secret (store/secrets.ts), so that only cursors this API issued are
// taken, by any replica. The signature also binds the cursor to the list and the owner it came
// from: another parent's cursor, or one from another list, is refused like a forged one.
import { createHmac, timingSafeEqual } from 'node:crypto'
import { validationFailed } from '../errors.js'
import { PAGE_LIMIT_DEFAULT } from '../schemas/common.js'

/** The list a cursor pages through, and whose it is (a parent's id, or parent and sub-account). */
export interface CursorScope {
  list:
    | 'sub-accounts'
    | 'api-keys'
    | 'usage'
    | 'key-usage'
    | 'events'
    | 'webhook-endpoints'
    | 'plans'
    | 'webhook-deliveries'
    | 'requests'
  owner: string
}

/** A sub-account's key list, as the path names the sub-account: a bad cursor is a 400 before any lookup. */
export function keyListScope(parentId: string, subId: string): CursorScope {
  return { list: 'api-keys', owner: `${parentId}/${subId.toLowerCase()}` }
}

/**
 * Where a page of a list in `seq` order starts (null: at its start; a list newest first reads it
 * as its `beforeSeq`) and how many rows to read: the page's limit and one more, to tell a next page.
 */
export interface PageStart {
  limit: number
  afterSeq: string | null
}

// 8 bytes of position (a bigserial) and 16 of HMAC-SHA-256 (128 bits), base64url: 32 characters.
// A list sorted by something other than its insertion order (the sub-accounts by name) also needs
// the sort value of the last row: its UTF-8 follows the tag, covered by it (keyed cursors, longer).
const POSITION_BYTES = 8
const TAG_BYTES = 16
const CURSOR = /^[A-Za-z0-9_-]{32}$/
const KEYED_CURSOR = /^[A-Za-z0-9_-]{32,}$/

function notIssued(): Error {
  return validationFailed([{ path: '/querystring/cursor', message: 'is not a cursor issued by this API' }])
}

export class Cursors {
  private secret: Promise<Buffer> | null = null

  /** `loadSecret` is asked once, when the first cursor is made or read (again after a failure). */
  private readonly loadSecret: () => Promise<Buffer>
  constructor(loadSecret: () => Promise<Buffer>) {
    this.loadSecret = loadSecret
  }

  private key(): Promise<Buffer> {
    if (this.secret === null) {
      this.secret = this.loadSecret()
      this.secret.catch(() => {
        this.secret = null
      })
    }
    return this.secret
  }

  private static tag(key: Buffer, position: Buffer, scope: CursorScope, sortKey: Buffer | null = null): Buffer {
    const hmac = createHmac('sha256', key)
    // A keyed cursor's tag has its own domain: a plain cursor can never pass for a keyed one.
    hmac.update(`${sortKey === null ? 'cursor.v1' : 'cursor.keyed.v1'}\0${scope.list}\0${scope.owner}\0`)
    hmac.update(position)
    if (sortKey !== null) hmac.update(sortKey)
    return hmac.digest().subarray(0, TAG_BYTES)
  }

  async encode(seq: string, scope: CursorScope): Promise<string> {
    const position = Buffer.alloc(POSITION_BYTES)
    position.writeBigUInt64BE(BigInt(seq))
    const tag = Cursors.tag(await this.key(), position, scope)
    return Buffer.concat([position, tag]).toString('base64url')
  }

  /** A cursor that also carries the last row's sort value (`sortKey`), for a list not in `seq` order. */
  async encodeKeyed(seq: string, sortKey: string, scope: CursorScope): Promise<string> {
    const position = Buffer.alloc(POSITION_BYTES)
    position.writeBigUInt64BE(BigInt(seq))
    const key = Buffer.from(sortKey, 'utf8')
    const tag = Cursors.tag(await this.key(), position, scope, key)
    return Buffer.concat([position, tag, key]).toString('base64url')
  }

  /** The position and sort value a keyed cursor names; none given is null; anything else is a 400. */
  async decodeKeyed(cursor: string | undefined, scope: CursorScope): Promise<{ seq: string; sortKey: string } | null> {
    if (cursor === undefined) return null
    const found = await this.verifyKeyed(cursor, scope)
    if (found === null) throw notIssued()
    return found
  }

  /** Whether `cursor` is one this API issued for `scope`, plain or keyed (to tell why one is refused). */
  async issuedFor(cursor: string, scope: CursorScope): Promise<boolean> {
    if (CURSOR.test(cursor)) {
      try {
        await this.decode(cursor, scope)
        return true
      } catch {
        // not a plain one for this scope; it may still be keyed
      }
    }
    return (await this.verifyKeyed(cursor, scope)) !== null
  }

  private async verifyKeyed(cursor: string, scope: CursorScope): Promise<{ seq: string; sortKey: string } | null> {
    if (!KEYED_CURSOR.test(cursor)) return null
    const bytes = Buffer.from(cursor, 'base64url')
    if (bytes.length < POSITION_BYTES + TAG_BYTES) return null
    const position = bytes.subarray(0, POSITION_BYTES)
    const key = bytes.subarray(POSITION_BYTES + TAG_BYTES)
    const expected = Cursors.tag(await this.key(), position, scope, key)
    if (!timingSafeEqual(bytes.subarray(POSITION_BYTES, POSITION_BYTES + TAG_BYTES), expected)) return null
    const seq = position.readBigUInt64BE()
    if (seq < 1n) return null
    return { seq: seq.toString(), sortKey: key.toString('utf8') }
  }

  /** The position a cursor names; none given is null; anything this API did not issue for `scope` is a 400. */
  async decode(cursor: string | undefined, scope: CursorScope): Promise<string | null> {
    if (cursor === undefined) return null
    if (!CURSOR.test(cursor)) throw notIssued()
    const bytes = Buffer.from(cursor, 'base64url')
    const position = bytes.subarray(0, POSITION_BYTES)
    const expected = Cursors.tag(await this.key(), position, scope)
    if (!timingSafeEqual(bytes.subarray(POSITION_BYTES), expected)) throw notIssued()
    const seq = position.readBigUInt64BE()
    if (seq < 1n) throw notIssued()
    return seq.toString()
  }

  /**
   * Turns limit+1 fetched rows into a page and the cursor of the next one; with `sortKeyOf`, a
   * keyed cursor carrying the last row's sort value.
   */
  async page<Row extends { seq: string }, Item>(
    rows: Row[],
    limit: number,
    present: (row: Row) => Item,
    scope: CursorScope,
    sortKeyOf?: (row: Row) => string,
  ): Promise<{ data: Item[]; next_cursor: string | null }> {
    const hasMore = rows.length > limit
    const pageRows = hasMore ? rows.slice(0, limit) : rows
    const last = pageRows[pageRows.length - 1]
    let next: string | null = null
    if (hasMore && last !== undefined) {
      next =
        sortKeyOf === undefined
          ? await this.encode(last.seq, scope)
          : await this.encodeKeyed(last.seq, sortKeyOf(last), scope)
    }
    return { data: pageRows.map(present), next_cursor: next }
  }

  /**
   * A page of a list in `seq` order, as PageQuery asks for it (`limit`, PAGE_LIMIT_DEFAULT
   * without one; `cursor`): the cursor read for `scope` first (one this API did not issue for it
   * is a 400 before `read` is called), then `read` from where it says, limit+1 rows, then `page`.
   */
  async list<Row extends { seq: string }, Item>(
    query: { limit?: number | undefined; cursor?: string | undefined },
    scope: CursorScope,
    read: (start: PageStart) => Promise<Row[]>,
    present: (row: Row) => Item,
  ): Promise<{ data: Item[]; next_cursor: string | null }> {
    const { limit = PAGE_LIMIT_DEFAULT, cursor } = query
    const afterSeq = await this.decode(cursor, scope)
    return this.page(await read({ limit: limit + 1, afterSeq }), limit, present, scope)
  }
}
