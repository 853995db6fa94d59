// Reading Postgres's binary COPY format (the manual's "COPY", "Binary Format"), the other way from
// copy-format.ts: the tuples of a `COPY … TO STDOUT (FORMAT binary)` as its chunks arrive, and
// the values of the request log's arrays read off their bytes. A number or an id read this way
// costs no text to decode or parse (bench/README.md, the limit simulator).

/** The stream's first bytes: its signature, then flags (none set) and the header extension's length. */
const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1')
const HEADER_BYTES = 19
const TWO_TO_32 = 2 ** 32

/**
 * The tuples of one COPY, from its chunks in order: `push` hands each complete tuple to `visit`
 * with the buffer, the offset of its first field and its count of fields, keeping a tuple cut
 * between two chunks until the next. Postgres sends a tuple a message, but a stream may join or
 * split them.
 */
export class CopyTuples {
  private pending: Buffer | null = null
  private headerRead = false
  /** True once the trailer has arrived: the stream holds nothing more. */
  ended = false

  private readonly visit: (data: Buffer, at: number, fields: number) => void
  constructor(visit: (data: Buffer, at: number, fields: number) => void) {
    this.visit = visit
  }

  push(chunk: Buffer): void {
    const data = this.pending === null ? chunk : Buffer.concat([this.pending, chunk])
    this.pending = null
    let at = 0
    if (!this.headerRead) {
      if (data.length < HEADER_BYTES || data.length < HEADER_BYTES + data.readInt32BE(15)) {
        this.pending = data
        return
      }
      if (!data.subarray(0, SIGNATURE.length).equals(SIGNATURE) || data.readInt32BE(11) !== 0)
        throw new Error('request log: not a binary COPY, or one with flags this reader does not know')
      at = HEADER_BYTES + data.readInt32BE(15)
      this.headerRead = true
    }
    try {
      while (at + 2 <= data.length) {
        const fields = data.readInt16BE(at)
        if (fields === -1) {
          this.ended = true
          return
        }
        const end = tupleEnd(data, at + 2, fields)
        if (end === -1) break
        this.visit(data, at + 2, fields)
        at = end
      }
      if (at < data.length) this.pending = data.subarray(at)
    } finally {
      forgetView()
    }
  }
}

/** Where a tuple whose fields start at `at` ends; -1 when its last bytes have not arrived. */
function tupleEnd(data: Buffer, at: number, fields: number): number {
  for (let field = 0; field < fields; field++) {
    if (at + 4 > data.length) return -1
    const length = data.readInt32BE(at)
    at += 4 + Math.max(length, 0)
  }
  return at <= data.length ? at : -1
}

/**
 * A DataView over `data`, the last one made kept: V8 compiles its reads to single loads, where a
 * Buffer's readInt32BE checks its bounds and joins four bytes (a tenth of the read's time over 10^7
 * records). Every value of a tuple is read from the same buffer, so the view is made once a chunk.
 */
let viewed: Buffer | null = null
const NO_BYTES = new DataView(new ArrayBuffer(0))
let view: DataView<ArrayBufferLike> = NO_BYTES
/** The last chunk is not kept past its reading (a COPY's chunks run to hundreds of kB). */
function forgetView(): void {
  viewed = null
  view = NO_BYTES
}

function viewOf(data: Buffer): DataView {
  if (data !== viewed) {
    viewed = data
    view = new DataView(data.buffer, data.byteOffset, data.byteLength)
  }
  return view
}

/** Moves over one field: the offset of the next. */
export function nextField(data: Buffer, at: number): number {
  return at + 4 + Math.max(data.readInt32BE(at), 0)
}

/** A field that is one int8, as a number (exact below 2^53, as times in microseconds are). */
export function int8Field(data: Buffer, at: number): number {
  return int8At(data, at + 4)
}

function int8At(data: Buffer, at: number): number {
  const bytes = viewOf(data)
  return bytes.getInt32(at) * TWO_TO_32 + bytes.getUint32(at + 4)
}

/**
 * The elements of a one-dimensional array field, each handed to `element` with its offset and
 * length (-1: null); null for a null field. The array's header: dimensions, a null flag and the
 * element type, then each dimension's size and lower bound (none for an empty array).
 */
function eachElement(data: Buffer, at: number, element: (at: number, length: number) => void): boolean {
  const bytes = viewOf(data)
  const fieldLength = bytes.getInt32(at)
  if (fieldLength === -1) return false
  at += 4
  if (bytes.getInt32(at) === 0) return true
  const count = bytes.getInt32(at + 12)
  at += 20
  for (let i = 0; i < count; i++) {
    const length = bytes.getInt32(at)
    element(at + 4, length)
    at += 4 + Math.max(length, 0)
  }
  return true
}

/** An int8[] or int4[] field's numbers (null elements as null); null for a null field. */
export function numbersField(data: Buffer, at: number): (number | null)[] | null {
  const values: (number | null)[] = []
  const present = eachElement(data, at, (from, length) => {
    if (length === 8) values.push(int8At(data, from))
    else if (length === 4) values.push(viewOf(data).getInt32(from))
    else if (length === -1) values.push(null)
    else throw new Error(`request log: a number of ${length} bytes in a COPY`)
  })
  return present ? values : null
}

/** A text[] field's strings (null elements as null); null for a null field. */
export function textsField(data: Buffer, at: number): (string | null)[] | null {
  const values: (string | null)[] = []
  const present = eachElement(data, at, (from, length) => {
    values.push(length === -1 ? null : data.toString('utf8', from, from + length))
  })
  return present ? values : null
}

/**
 * The ids of uuid[] fields as their text (`8-4-4-4-12` lowercase hex, as Postgres prints them),
 * each made once: a range's records name a few thousand sub-accounts millions of times.
 */
export class UuidTexts {
  /** By the id's first 53 bits; the rest of each is compared. */
  private readonly known = new Map<number, KnownUuid>()

  field(data: Buffer, at: number): string[] | null {
    const ids: string[] = []
    const present = eachElement(data, at, (from) => {
      ids.push(this.text(data, from))
    })
    return present ? ids : null
  }

  private text(data: Buffer, at: number): string {
    const bytes = viewOf(data)
    const a = bytes.getUint32(at)
    const b = bytes.getUint32(at + 4)
    const c = bytes.getUint32(at + 8)
    const d = bytes.getUint32(at + 12)
    const key = a * 0x200000 + (b >>> 11)
    const first = this.known.get(key)
    for (let known = first; known !== undefined; known = known.next)
      if (known.b === b && known.c === c && known.d === d) return known.text
    const hex = data.toString('hex', at, at + 16)
    const text = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
    this.known.set(key, { b, c, d, text, next: first })
    return text
  }
}

interface KnownUuid {
  b: number
  c: number
  d: number
  text: string
  next: KnownUuid | undefined
}
