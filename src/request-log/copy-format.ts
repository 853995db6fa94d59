// Postgres's binary COPY format (the manual's "COPY", "Binary Format"), as much of it as the request
// log's rows need: the writer sends its rows this way to a real Postgres, which then reads each
// value as it is stored instead of parsing its text (bench/README.md, the request log: about 3.5 µs
// of the database's CPU a record, as text, was mostly that parsing).

/** The OIDs of the element types of the log's arrays (pg_type). */
export const OID = { bool: 16, int8: 20, int2: 21, int4: 23, text: 25, uuid: 2950 } as const
type ElementType = keyof typeof OID

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1')
/** 2000-01-01T00:00:00Z, Postgres's epoch, in microseconds since Unix's. */
const POSTGRES_EPOCH_US = 946_684_800_000_000
const TWO_TO_32 = 2 ** 32

/** The value of a hex digit's character code. */
function hexValue(code: number): number {
  return code <= 57 ? code - 48 : (code | 32) - 87
}

/** A UUID's 16 bytes from its text form. */
function uuidBytes(uuid: string): Uint8Array {
  const bytes = new Uint8Array(16)
  let at = 0
  for (let i = 0; i < uuid.length; i += 2) {
    if (uuid.charCodeAt(i) === 45 /* - */) i++
    bytes[at++] = (hexValue(uuid.charCodeAt(i)) << 4) | hexValue(uuid.charCodeAt(i + 1))
  }
  return bytes
}

/** A COPY stream's bytes, written into one growing buffer. */
export class CopyBuffer {
  private buffer = Buffer.allocUnsafe(64 * 1024)
  private at = 0
  private readonly uuids = new Map<string, Uint8Array>()

  constructor() {
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

  bytes(bytes: Buffer): void {
    this.room(bytes.length)
    bytes.copy(this.buffer, this.at)
    this.at += bytes.length
  }

  int16(n: number): void {
    this.room(2)
    this.buffer.writeInt16BE(n, this.at)
    this.at += 2
  }

  int32(n: number): void {
    this.room(4)
    this.buffer.writeInt32BE(n, this.at)
    this.at += 4
  }

  /** A safe integer as int8, without a BigInt. */
  int64(n: number): void {
    this.room(8)
    const high = Math.floor(n / TWO_TO_32)
    this.buffer.writeInt32BE(high, this.at)
    this.buffer.writeUInt32BE(n - high * TWO_TO_32, this.at + 4)
    this.at += 8
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
    // A row's sub-accounts and keys repeat: each is decoded once a batch.
    let bytes = this.uuids.get(uuid)
    if (bytes === undefined) {
      bytes = uuidBytes(uuid)
      this.uuids.set(uuid, bytes)
    }
    this.buffer.set(bytes, this.at)
    this.at += 16
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
    buffer.writeInt32BE(written, this.at)
    this.at = start + written
  }

  /** A one-dimensional array of `type`: its elements written by `each`, null ones as `null`. */
  array<T>(type: ElementType, elements: readonly T[], each: (element: T) => void, hasNull = false): void {
    this.room(24)
    const start = this.at
    this.at += 4 // the length, once known
    if (elements.length === 0) {
      this.int32(0) // no dimensions
      this.int32(0)
      this.int32(OID[type])
    } else {
      this.int32(1)
      this.int32(hasNull ? 1 : 0)
      this.int32(OID[type])
      this.int32(elements.length)
      this.int32(1) // lower bound
      for (let i = 0; i < elements.length; i++) each(elements[i]!)
    }
    this.buffer.writeInt32BE(this.at - start - 4, start)
  }

  /** The stream's bytes, with its trailer. */
  finish(): Buffer {
    this.int16(-1)
    return this.buffer.subarray(0, this.at)
  }
}
