// Postgres's binary COPY format (the manual's "COPY", "Binary Format"), as much of it as the request
// log's rows need: the writer sends its rows this way to a real Postgres, which then reads each
// value as it is stored instead of parsing its text (bench/README.md, the request log: about 3.5 µs
// of the database's CPU a record, as text, was mostly that parsing).

/** The OIDs of the element types of the log's arrays (pg_type). */
const OID = { bool: 16, int8: 20, int2: 21, int4: 23, text: 25, uuid: 2950 } as const
type ElementType = keyof typeof OID

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1')
/** 2000-01-01T00:00:00Z, Postgres's epoch, in microseconds since Unix's. */
const POSTGRES_EPOCH_US = 946_684_800_000_000
const TWO_TO_32 = 2 ** 32

/** The value of each hex digit, by its character code. */
const HEX = new Uint8Array(128)
for (let code = 0; code < 10; code++) HEX[48 + code] = code
for (let code = 0; code < 6; code++) HEX[65 + code] = HEX[97 + code] = 10 + code

/** The character codes of the lowercase hex digits, by value. */
const HEX_DIGITS = Uint8Array.from('0123456789abcdef', (digit) => digit.charCodeAt(0))

/** A COPY stream's bytes, written into one growing buffer. */
export class CopyBuffer {
  private buffer: Buffer
  private at = 0

  /** `expectedBytes`: about how large it will be, so that it seldom grows. */
  constructor(expectedBytes = 64 * 1024) {
    this.buffer = Buffer.allocUnsafe(expectedBytes)
    this.reset()
  }

  /** Bytes of memory it holds. */
  get capacity(): number {
    return this.buffer.length
  }

  /**
   * Begins a new stream in the same memory: memory new to the process costs a page fault a page
   * on its first write, about a tenth of a batch's encoding.
   */
  reset(): void {
    this.at = 0
    this.bytes(SIGNATURE)
    this.int32(0) // flags
    this.int32(0) // no header extension
  }

  /** Room for `n` more bytes. */
  private room(n: number): void {
    if (this.at + n <= this.buffer.length) return
    const larger = Buffer.allocUnsafe(Math.max(this.buffer.length * 2, this.at + n))
    this.buffer.copy(larger, 0, 0, this.at)
    this.buffer = larger
  }

  private bytes(bytes: Buffer): void {
    this.room(bytes.length)
    bytes.copy(this.buffer, this.at)
    this.at += bytes.length
  }

  // Big-endian, byte by byte: Buffer's writeInt32BE checks its range first, at every call.

  int16(n: number): void {
    this.room(2)
    const buffer = this.buffer
    const at = this.at
    buffer[at] = n >>> 8
    buffer[at + 1] = n
    this.at = at + 2
  }

  int32(n: number): void {
    this.room(4)
    this.put32(n, this.at)
    this.at += 4
  }

  /** A safe integer as int8, without a BigInt. */
  int64(n: number): void {
    this.room(8)
    const high = Math.floor(n / TWO_TO_32)
    this.put32(high, this.at)
    this.put32(n - high * TWO_TO_32, this.at + 4)
    this.at += 8
  }

  /** The low 32 bits of `n` at `at` (a negative `n` in two's complement). */
  private put32(n: number, at: number): void {
    const buffer = this.buffer
    buffer[at] = n >>> 24
    buffer[at + 1] = n >>> 16
    buffer[at + 2] = n >>> 8
    buffer[at + 3] = n
  }

  /** A tuple of `fields` fields begins: each value written next is one of them. */
  tuple(fields: number): void {
    this.int16(fields)
  }

  null(): void {
    this.int32(-1)
  }

  // Values, each with its length first, as a field or as an element of an array.

  boolValue(value: boolean): void {
    this.int32(1)
    this.room(1)
    this.buffer[this.at++] = value ? 1 : 0
  }

  int2Value(n: number): void {
    this.int32(2)
    this.int16(n)
  }

  int4Value(n: number): void {
    this.int32(4)
    this.int32(n)
  }

  int8Value(n: number): void {
    this.int32(8)
    this.int64(n)
  }

  /** Microseconds since the Unix epoch, as timestamptz. */
  timestampValue(micros: number): void {
    this.int8Value(micros - POSTGRES_EPOCH_US)
  }

  /** A UUID in its text form (8-4-4-4-12 hex digits), as its 16 bytes. */
  uuidValue(uuid: string): void {
    this.int32(16)
    this.room(16)
    // Decoded here: Buffer's hex decoding is a native call a group of digits, and a cache of the
    // decoded costs more than it saves when a batch holds thousands of sub-accounts and keys.
    const buffer = this.buffer
    let at = this.at
    for (let i = 0; i < 36; i += 2) {
      if (i === 8 || i === 13 || i === 18 || i === 23) i++
      buffer[at++] = (HEX[uuid.charCodeAt(i)]! << 4) | HEX[uuid.charCodeAt(i + 1)]!
    }
    this.at = at
  }

  /** Text as UTF-8 (a lone surrogate becomes U+FFFD on the way); NUL, which text cannot hold, too. */
  textValue(text: string): void {
    const length = text.length
    this.room(4 + length * 3)
    const buffer = this.buffer
    const start = this.at + 4
    // ASCII, as ids, methods, routes and addresses are, is copied here: a call into Buffer's
    // native write costs more than the loop for strings this short.
    let i = 0
    for (; i < length; i++) {
      const code = text.charCodeAt(i)
      if (code === 0 || code > 0x7f) break
      buffer[start + i] = code
    }
    let written = i
    if (i < length) {
      const rest = text.slice(i)
      written += buffer.write(
        rest.indexOf('\u0000') === -1 ? rest : rest.replaceAll('\u0000', '\ufffd'),
        start + i,
        'utf8',
      )
    }
    this.put32(written, this.at)
    this.at = start + written
  }

  // One-dimensional arrays, each element written by the matching value method above.

  uuids(values: readonly string[]): void {
    const start = this.arrayHead('uuid', values.length, false)
    for (let i = 0; i < values.length; i++) {
      const value = values[i]!
      // A row's records are mostly of one sub-account and key: the last value's bytes again.
      if (i > 0 && value === values[i - 1]) this.repeat(20)
      else this.uuidValue(value)
    }
    this.arrayEnd(start)
  }

  /** The last `n` bytes written, once more. */
  private repeat(n: number): void {
    this.room(n)
    const buffer = this.buffer
    const at = this.at
    for (let i = 0; i < n; i++) buffer[at + i] = buffer[at - n + i]!
    this.at = at + n
  }

  /** Texts, null ones as SQL NULL. */
  texts(values: readonly (string | null)[], hasNull = false): void {
    const start = this.arrayHead('text', values.length, hasNull)
    // A row's methods, routes and addresses mostly repeat the record before's: its bytes again.
    let lastBytes = 0
    for (let i = 0; i < values.length; i++) {
      const value = values[i]!
      if (value === null) this.null()
      else if (i > 0 && value === values[i - 1]) this.repeat(lastBytes)
      else {
        const at = this.at
        this.textValue(value)
        lastBytes = this.at - at
      }
    }
    this.arrayEnd(start)
  }

  /**
   * Request ids as text: each a count of an id made with `stem` (its 12 hex digits after it), or
   * -1 for the next of `given`.
   */
  requestIds(madeCounts: readonly number[], stem: string | null, given: readonly string[]): void {
    const start = this.arrayHead('text', madeCounts.length, false)
    let next = 0
    for (let i = 0; i < madeCounts.length; i++) {
      const count = madeCounts[i]!
      if (count === -1) this.textValue(given[next++]!)
      else this.madeIdValue(stem!, count)
    }
    this.arrayEnd(start)
  }

  /** `stem` (ASCII) and `count` as 12 lowercase hex digits, without making the string. */
  private madeIdValue(stem: string, count: number): void {
    const length = stem.length + 12
    this.int32(length)
    this.room(length)
    const buffer = this.buffer
    let at = this.at
    for (let i = 0; i < stem.length; i++) buffer[at++] = stem.charCodeAt(i)
    // The 48-bit count in two halves of 24 bits: bit operations hold 32 at most.
    const high = Math.floor(count / 2 ** 24)
    const low = count - high * 2 ** 24
    for (let shift = 20; shift >= 0; shift -= 4) buffer[at++] = HEX_DIGITS[(high >>> shift) & 15]!
    for (let shift = 20; shift >= 0; shift -= 4) buffer[at++] = HEX_DIGITS[(low >>> shift) & 15]!
    this.at = at
  }

  int2s(values: readonly number[]): void {
    const start = this.arrayHead('int2', values.length, false)
    for (let i = 0; i < values.length; i++) this.int2Value(values[i]!)
    this.arrayEnd(start)
  }

  int4s(values: readonly number[]): void {
    const start = this.arrayHead('int4', values.length, false)
    for (let i = 0; i < values.length; i++) this.int4Value(values[i]!)
    this.arrayEnd(start)
  }

  int8s(values: readonly number[]): void {
    const start = this.arrayHead('int8', values.length, false)
    for (let i = 0; i < values.length; i++) this.int8Value(values[i]!)
    this.arrayEnd(start)
  }

  /** An array's header; returns where its length goes, written by arrayEnd once known. */
  private arrayHead(type: ElementType, length: number, hasNull: boolean): number {
    this.room(24)
    const start = this.at
    this.at += 4
    if (length === 0) {
      this.int32(0) // no dimensions
      this.int32(0)
      this.int32(OID[type])
    } else {
      this.int32(1)
      this.int32(hasNull ? 1 : 0)
      this.int32(OID[type])
      this.int32(length)
      this.int32(1) // lower bound
    }
    return start
  }

  private arrayEnd(start: number): void {
    this.put32(this.at - start - 4, start)
  }

  /** The stream's bytes, with its trailer. */
  finish(): Buffer {
    this.int16(-1)
    return this.buffer.subarray(0, this.at)
  }
}
