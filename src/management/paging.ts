// Opaque cursors for keyset paging: the position of the last row of a page.
import { validationFailed } from '../errors.js'

export function encodeCursor(seq: string): string {
  return Buffer.from(`s:${seq}`).toString('base64url')
}

/** Decodes a cursor; anything this gateway did not issue is a 400. */
export function decodeCursor(cursor: string | undefined): string | null {
  if (cursor === undefined) return null
  const match = /^s:([1-9]\d{0,17})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'))
  if (!match) throw validationFailed([{ path: '/querystring/cursor', message: 'is not a cursor issued by this API' }])
  return match[1]!
}

/** Turns limit+1 fetched rows into a page and the cursor of the next one. */
export function toPage<Row extends { seq: string }, Item>(rows: Row[], limit: number, present: (row: Row) => Item) {
  const hasMore = rows.length > limit
  const pageRows = hasMore ? rows.slice(0, limit) : rows
  return {
    data: pageRows.map(present),
    next_cursor: hasMore ? encodeCursor(pageRows[pageRows.length - 1]!.seq) : null,
  }
}
