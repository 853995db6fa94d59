// A request log row keeps its records' trace ids as numbers until it is written (rows.ts): a trace
// id is 32 hex digits (W3C Trace Context), and a string kept for every record until its row goes
// out outlives the young generation, where the collector's cost is only what survives. Kept as
// strings, the ids cost the gateway tracing at 0.01 about 4 µs of collector work a request
// (bench/README.md, issue 84); as four 32-bit words in an array of doubles, nothing a record.

/** Words a trace id takes. */
export const TRACE_ID_WORDS = 4
/** The words of a record with no trace id. */
const NONE = -1

/** The value of hex digits `from` to `from + 8` of `id`, or NONE where one is not a lowercase hex digit. */
function word(id: string, from: number): number {
  let value = 0
  for (let i = from; i < from + 8; i++) {
    const code = id.charCodeAt(i)
    const digit = code >= 48 && code <= 57 ? code - 48 : code >= 97 && code <= 102 ? code - 87 : -1
    if (digit === -1) return NONE
    value = value * 16 + digit
  }
  return value
}

/**
 * Appends `traceId`'s four words to `words`, or NONE four times for null. A trace id is 32
 * lowercase hex digits, as the propagator reads a client's and the SDK makes ours; anything else
 * is kept as none, which cannot come from either.
 */
export function pushTraceId(words: number[], traceId: string | null): void {
  const valid = traceId !== null && traceId.length === 32
  const a = valid ? word(traceId, 0) : NONE
  const b = valid ? word(traceId, 8) : NONE
  const c = valid ? word(traceId, 16) : NONE
  const d = valid ? word(traceId, 24) : NONE
  if (a === NONE || b === NONE || c === NONE || d === NONE) words.push(NONE, NONE, NONE, NONE)
  else words.push(a, b, c, d)
}

/** Appends NONE for `records` records. */
export function pushNone(words: number[], records: number): void {
  for (let i = 0; i < records * TRACE_ID_WORDS; i++) words.push(NONE)
}

/** The trace ids of `words`, a record each, null for none: as pushTraceId took them. */
export function traceIdsOf(words: readonly number[]): (string | null)[] {
  const ids: (string | null)[] = []
  for (let at = 0; at < words.length; at += TRACE_ID_WORDS) {
    if (words[at] === NONE) ids.push(null)
    else {
      let id = ''
      for (let i = at; i < at + TRACE_ID_WORDS; i++) id += words[i]!.toString(16).padStart(8, '0')
      ids.push(id)
    }
  }
  return ids
}
