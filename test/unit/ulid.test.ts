// ULIDs of event ids (src/events/ulid.ts) against the specification's example and properties.
import { randomBytes } from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import { eventId, ULID_PATTERN, ulid, ulidTime } from '../../src/events/ulid.js'

t.test('the encoding: time then randomness, Crockford base32', async (t) => {
  // The reference implementation's example (ulid/javascript README): 1469918176385 ms is 01ARYZ6S41.
  t.equal(ulid(1469918176385, Buffer.alloc(10)).slice(0, 10), '01ARYZ6S41')
  t.equal(ulid(0, Buffer.alloc(10)), '0'.repeat(26))
  t.equal(ulid(2 ** 48 - 1, Buffer.alloc(10, 0xff)), '7ZZZZZZZZZZZZZZZZZZZZZZZZZ')
  t.equal(ulid(1, Buffer.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 31])).slice(10), `${'0'.repeat(15)}Z`)
  t.throws(() => ulid(-1))
  t.throws(() => ulid(2 ** 48))
  t.throws(() => ulid(1.5))
  t.throws(() => ulid(0, Buffer.alloc(9)))
  t.throws(() => ulidTime('U0000000000000000000000000'))
})

t.test('properties: 26 characters, its time back, sorted by time', async (t) => {
  const pattern = new RegExp(ULID_PATTERN)
  const roundTrip = fc.property(
    fc.integer({ min: 0, max: 2 ** 48 - 1 }),
    fc.uint8Array({ minLength: 10, maxLength: 10 }),
    (ms, bytes) => {
      const id = ulid(ms, Buffer.from(bytes))
      return id.length === 26 && pattern.test(id) && ulidTime(id) === ms
    },
  )
  const sorted = fc.property(
    fc.integer({ min: 0, max: 2 ** 48 - 2 }),
    fc.integer({ min: 1, max: 1000 }),
    (ms, later) => {
      const a = ulid(ms, randomBytes(10))
      const b = ulid(Math.min(ms + later, 2 ** 48 - 1), randomBytes(10))
      return a < b
    },
  )
  t.doesNotThrow(() => fc.assert(roundTrip), 'its time back')
  t.doesNotThrow(() => fc.assert(sorted), 'a later time sorts after')
})

t.test('event ids: evt_ and a ULID of now, never twice', async (t) => {
  const before = Date.now()
  const ids = Array.from({ length: 10_000 }, () => eventId())
  t.equal(new Set(ids).size, ids.length)
  for (const id of ids.slice(0, 5)) {
    t.match(id, /^evt_[0-7][0-9A-HJKMNP-TV-Z]{25}$/)
    t.ok(ulidTime(id.slice(4)) >= before && ulidTime(id.slice(4)) <= Date.now())
  }
})
