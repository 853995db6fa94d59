// Opaque keyset cursors (docs/api.md, Paging): the position of the last row of a page, signed
// with the deployment's secret (store/secrets.ts), so that only cursors this API issued are
// taken, by any replica. The signature also binds the cursor to the list and the owner it came
// from: another parent's cursor, or one from another list, is refused like a forged one.
import { createHmac, timingSafeEqual } from 'node:crypto'
import { validationFailed } from '../errors.js'

/** The list a cursor pages through, and whose it is (a parent's id, or parent and sub-account). */
export interface CursorScope {
  list: 'sub-accounts' | 'api-keys' | 'usage' | 'events' | 'webhook-endpoints' | 'webhook-deliveries' | 'requests'
  owner: string
}

/** A sub-account's key list, as the path names the sub-account: a bad cursor is a 400 before any lookup. */
export function keyListScope(parentId: string, subId: string): CursorScope {
  return { list: 'api-keys', owner: `${parentId}/${subId.toLowerCase()}` }
}

// 8 bytes of position (a bigserial) and 16 of HMAC-SHA-256 (128 bits), base64url: 32 characters.
const POSITION_BYTES = 8
const TAG_BYTES = 16
const CURSOR = /^[A-Za-z0-9_-]{32}$/

function notIssued(): Error {
  return validationFailed([{ path: '/querystring/cursor', message: 'is not a cursor issued by this API' }])
}

export class Cursors {
  private secret: Promise<Buffer> | null = null

  /** `loadSecret` is asked once, when the first cursor is made or read (again after a failure). */
  constructor(private readonly loadSecret: () => Promise<Buffer>) {}

  private key(): Promise<Buffer> {
    if (this.secret === null) {
      this.secret = this.loadSecret()
      this.secret.catch(() => {
        this.secret = null
      })
    }
    return this.secret
  }

  private static tag(key: Buffer, position: Buffer, scope: CursorScope): Buffer {
    return createHmac('sha256', key)
      .update(`cursor.v1\0${scope.list}\0${scope.owner}\0`)
      .update(position)
      .digest()
      .subarray(0, TAG_BYTES)
  }

  async encode(seq: string, scope: CursorScope): Promise<string> {
    const position = Buffer.alloc(POSITION_BYTES)
    position.writeBigUInt64BE(BigInt(seq))
    const tag = Cursors.tag(await this.key(), position, scope)
    return Buffer.concat([position, tag]).toString('base64url')
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

  /** Turns limit+1 fetched rows into a page and the cursor of the next one. */
  async page<Row extends { seq: string }, Item>(
    rows: Row[],
    limit: number,
    present: (row: Row) => Item,
    scope: CursorScope,
  ): Promise<{ data: Item[]; next_cursor: string | null }> {
    const hasMore = rows.length > limit
    const pageRows = hasMore ? rows.slice(0, limit) : rows
    return {
      data: pageRows.map(present),
      next_cursor: hasMore ? await this.encode(pageRows[pageRows.length - 1]!.seq, scope) : null,
    }
  }
}
