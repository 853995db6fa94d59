import { test } from 'tap'
import { newRequestId, requestIdSource } from '../../src/ops/request-id.js'

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

/** The Unix millisecond in an id's first 48 bits. */
const msOf = (id: string) => parseInt(id.slice(0, 8) + id.slice(9, 13), 16)

test('request ids are UUIDv7 (RFC 9562): version 7, variant 10, the current millisecond in the first 48 bits', async (t) => {
  const before = Date.now()
  const id = newRequestId()
  const after = Date.now()
  t.match(id, UUID_V7)
  t.ok(msOf(id) >= before && msOf(id) <= after, `the time field (${msOf(id)}) is the millisecond it was made in (${before}–${after})`)
})

test('ids of one millisecond count up; past 4,096 they move on to the next millisecond, still unique and in order', async (t) => {
  const fixed = Date.UTC(2026, 10, 21)
  const next = requestIdSource(() => fixed)
  const ids = Array.from({ length: 5_000 }, () => next())
  t.ok(ids.every((id) => UUID_V7.test(id)), 'every one is a UUIDv7')
  t.equal(new Set(ids).size, ids.length, 'no id repeats')
  t.equal(ids.findIndex((id, i) => i > 0 && id <= ids[i - 1]!), -1, 'each sorts after the one before')
  t.equal(msOf(ids[4_095]!), fixed, 'the 4,096th is in the clock\'s millisecond')
  t.equal(msOf(ids[4_096]!), fixed + 1, 'the 4,097th in the next')
})

test('a clock that steps back does not break the order', async (t) => {
  let now = Date.UTC(2026, 10, 21, 12)
  const next = requestIdSource(() => now)
  const first = next()
  now -= 5_000
  const second = next()
  t.ok(second > first, 'the later id sorts after the earlier one')
  t.equal(msOf(second), msOf(first), 'it keeps the last millisecond')
})

test('the random bits are drawn afresh each millisecond', async (t) => {
  let now = Date.UTC(2026, 10, 21)
  const next = requestIdSource(() => now)
  const tails = new Set<string>()
  for (let i = 0; i < 20; i++, now++) tails.add(next().slice(19))
  t.equal(tails.size, 20, 'twenty milliseconds, twenty different random tails')
})
