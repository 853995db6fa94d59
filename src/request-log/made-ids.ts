// The request ids the gateway makes (http/guards.ts), as the request log keeps them: a stem of the
// process and a count, so that a row holds a count rather than the id's text (rows.ts), and a
// lookup by id finds its row by the count's range (record-by-id.ts).

/** A request id the gateway made (http/guards.ts): a UUID's first 24 characters, then 12 hex digits counting. */
const MADE_ID = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-)([0-9a-f]{12})$/

export const MADE_ID_LENGTH = 36
const STEM_LENGTH = 24

/** The count of a made id, from its last 12 characters; -1 when one of them is not a hex digit. */
export function hexCount(id: string): number {
  let count = 0
  for (let i = STEM_LENGTH; i < MADE_ID_LENGTH; i++) {
    const code = id.charCodeAt(i)
    const digit = code >= 48 && code <= 57 ? code - 48 : code >= 97 && code <= 102 ? code - 87 : -1
    if (digit === -1) return -1
    count = count * 16 + digit
  }
  return count
}

/** A count as a made id's 12 hex digits. */
export const hexDigits = (count: number) => count.toString(16).padStart(MADE_ID_LENGTH - STEM_LENGTH, '0')

/** The stem and the count of a request id of the gateway's shape; null for any other. */
export function madeIdParts(id: string): { stem: string; count: number } | null {
  const match = MADE_ID.exec(id)
  return match === null ? null : { stem: match[1]!, count: Number.parseInt(match[2]!, 16) }
}

/**
 * A row's made ids lie within this many counts of one another: the lookup by id then reads only
 * the rows whose highest count is at most this far above the one it looks for (record-by-id.ts), a few
 * hundred thousand index entries at worst, where it read every row of the account. An id is counted
 * when its request arrives and recorded when it is answered, so a request that took long (a stream,
 * a WebSocket) comes after much newer ones; so may a refused key's record, added once its tenant is
 * known, and any record of a row left open while Postgres was away.
 */
export const MAX_ID_SPAN = 262_144
