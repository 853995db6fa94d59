// Reading a binary COPY (request-log/copy-tuples.ts, replay-copy.ts's rows): a stream written in
// the format the request log's writer sends (copy-format.ts) reads back as the same values, however
// its chunks cut it, with null fields and elements, an empty array and ids that share a prefix.
import t from 'tap'
import { CopyBuffer } from '../../src/request-log/copy-format.js'
import { CopyTuples, UuidTexts } from '../../src/request-log/copy-tuples.js'
import { rowOf, type SentRow } from '../../src/request-log/replay-copy.js'

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1')

// Two ids alike in their first 53 bits (found apart by the rest), and one that is not.
const ids = [
  '00000000-0000-0000-0000-000000000001',
  '00000000-0000-0000-0000-000000000002',
  'a1b2c3d4-e5f6-4789-8abc-def012345678',
]
const rows: SentRow[] = [
  {
    firstUs: 1_764_000_000_000_001,
    arrays: [
      [ids[0]!, ids[1]!, ids[0]!, ids[2]!],
      [1_764_000_000_000_001, 1_764_000_000_000_009, 1_764_000_000_000_005, 2 ** 53 - 1],
      [900, 0, 12_345_678_901, 1],
      [1, -1, 3, 0],
      [null, 'rate_limited', null, 'quota_exceeded'],
      [{ tokens: 12 }, null, { tokens: 0, images: 2 }, null],
    ],
  },
  // A row written before costs and units were kept, its codes all null.
  { firstUs: -5, arrays: [[ids[2]!], [-5], [-1], null, [null], null] },
  // An empty row (no record): arrays of no dimension.
  { firstUs: 7, arrays: [[], [], [], [], [], null] },
]

/** The rows as the writer's encoder makes a stream: header, a tuple each, trailer. */
function stream(): Buffer {
  const out = new CopyBuffer(256)
  for (const { firstUs, arrays } of rows) {
    const [tenantIds, timesUs, durationsUs, costs, codes, units] = arrays
    out.tuple(7)
    out.int8Value(firstUs)
    out.uuids(tenantIds)
    out.int8s(timesUs)
    out.int8s(durationsUs)
    if (costs === null) out.null()
    else out.int4s(costs as number[])
    out.texts(codes, true)
    if (units === null) out.null()
    else
      out.texts(
        units.map((u) => (u === null ? null : JSON.stringify(u))),
        true,
      )
  }
  const bytes = out.finish()
  t.ok(bytes.subarray(0, 11).equals(SIGNATURE), 'the stream opens with the signature')
  return bytes
}

function read(chunks: Buffer[]) {
  const uuids = new UuidTexts()
  const seen: SentRow[] = []
  const tuples = new CopyTuples((data, at, fields) => seen.push(rowOf(data, at, fields, uuids)))
  for (const chunk of chunks) tuples.push(chunk)
  return { seen, ended: tuples.ended }
}

const bytes = stream()
const cuts: [string, Buffer[]][] = [
  ['in one chunk', [bytes]],
  ['a byte a chunk', Array.from(bytes, (_, i) => bytes.subarray(i, i + 1))],
  [
    'in chunks of 7 bytes',
    Array.from({ length: Math.ceil(bytes.length / 7) }, (_, i) => bytes.subarray(i * 7, i * 7 + 7)),
  ],
  ['header apart, then the rest', [bytes.subarray(0, 19), bytes.subarray(19)]],
  ['the header cut', [bytes.subarray(0, 5), bytes.subarray(5, 23), bytes.subarray(23)]],
]
for (const [how, chunks] of cuts) {
  const { seen, ended } = read(chunks)
  t.same(seen, rows, `${how}: every row, every value as written`)
  t.ok(ended, `${how}: the trailer is seen`)
}

t.test('a stream cut before its trailer has not ended, and keeps what is whole', async (t) => {
  const { seen, ended } = read([bytes.subarray(0, bytes.length - 10)])
  t.notOk(ended)
  t.same(seen, rows.slice(0, 2), 'the rows before the cut tuple')
})

t.test('ids alike in their first 53 bits are told apart by the rest', async (t) => {
  const { seen } = read([bytes])
  t.same(seen[0]!.arrays[0], [ids[0], ids[1], ids[0], ids[2]])
})

t.test('what is not such a COPY is refused, not misread', async (t) => {
  const notCopy = Buffer.from(bytes)
  notCopy[0] = 0x51
  t.throws(() => read([notCopy]), /not a binary COPY/, 'another signature')
  const flagged = Buffer.from(bytes)
  flagged.writeInt32BE(1 << 16, 11)
  t.throws(() => read([flagged]), /flags/, 'flags set (OIDs sent)')
  const sixFields = Buffer.from(bytes)
  sixFields.writeInt16BE(6, 19)
  t.throws(() => read([sixFields]), /of 6 fields, not 7/, 'a row of another shape')
  // Times as int2: a column of another type.
  const out = new CopyBuffer(64)
  out.tuple(7)
  out.int8Value(1)
  out.uuids([ids[0]!])
  out.int2s([5])
  for (let field = 0; field < 4; field++) out.null()
  t.throws(() => read([out.finish()]), /a number of 2 bytes/, 'a number of another size')
})
