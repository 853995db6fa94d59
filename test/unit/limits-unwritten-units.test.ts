// What a replica admitted under a quota that Postgres may not hold yet (src/limits/unwritten-units.ts):
// forgetting errs on the side of keeping a unit, so that a rebuilt month counts it twice rather
// than not at all.
import t from 'tap'
import { MAX_ENTRIES, UnwrittenUnits } from '../../src/limits/unwritten-units.js'

t.test('units by the time they were admitted, forgotten once written', async (t) => {
  const units = new UnwrittenUnits()
  units.add(1_000, 2)
  units.add(1_020, 3)
  units.add(1_100, 4)
  units.add(1_100, 0)
  t.equal(units.total(), 9)
  t.equal(units.since(1_030), 4, 'an entry ends at its latest unit')
  t.equal(units.since(1_010), 9, 'an entry spanning the instant is counted whole')
  units.forgetBefore(1_010)
  t.equal(units.total(), 9, 'an entry with a unit at or after the instant is kept whole')
  units.forgetBefore(1_021)
  t.equal(units.total(), 4, 'forgotten once its latest unit is before the instant')
})

t.test('units given back come off the latest, never below zero', async (t) => {
  const units = new UnwrittenUnits()
  units.add(1_000, 2)
  units.add(2_000, 1)
  units.remove(2)
  t.equal(units.total(), 1)
  t.equal(units.since(1_500), 0, 'the latest entry went first')
  units.remove(5)
  t.equal(units.total(), 0)
  units.add(3_000, 1)
  units.add(2_990, 1)
  t.equal(units.since(2_995), 2, 'a clock set back stamps a unit as late as the last')
  units.add(3_100, 1)
  units.forgetBefore(3_050)
  t.equal(units.total(), 1)
  units.clear()
  t.equal(units.total(), 0)
})

t.test('a long outage keeps every unit in a bounded number of entries, forgotten no earlier', async (t) => {
  const units = new UnwrittenUnits()
  const spans = MAX_ENTRIES * 3
  for (let i = 0; i < spans; i++) units.add(i * 100, 1)
  t.equal(units.total(), spans, 'no unit lost')
  t.equal(units.since((MAX_ENTRIES * 2 + 1) * 100), MAX_ENTRIES - 1, 'the latest entries are as they were')
  units.forgetBefore((spans - 10) * 100)
  t.equal(units.total(), 10, 'forgotten once their latest unit is written')
  const entries = (units as unknown as { entries: unknown[] }).entries
  t.ok(entries.length <= MAX_ENTRIES, `at most ${MAX_ENTRIES} entries`)
})
