// When signing keys sign, rotate and leave (src/signing-keys/schedule.ts), as plain
// functions of the keys' instants and the time.
import t from 'tap'
import {
  DAY_MS,
  NEXT_KEY_LEAD_MS,
  RETIRED_KEY_GRACE_MS,
  rotationDue,
  signerOf,
  statusOf,
} from '../../src/signing-keys/schedule.js'

const MINUTE = 60_000
const PERIOD = 30 * DAY_MS
const old = { kid: 'old', activatesAt: 0 }
const active = { kid: 'active', activatesAt: 1_000 * MINUTE }
const next = { kid: 'next', activatesAt: 2_000 * MINUTE }
const keys = [active, next, old]

t.test('the signer is the latest key already activated', async (t) => {
  t.equal(signerOf(keys, 1_500 * MINUTE), active)
  t.equal(signerOf(keys, 2_000 * MINUTE), next, 'from its instant on')
  t.equal(signerOf(keys, 2_000 * MINUTE - 1), active, 'not a millisecond before')
  t.equal(signerOf([next], 0), null, 'none before the first activates')
})

t.test('status: next before it signs, active while it does, retired after', async (t) => {
  const now = 1_500 * MINUTE
  t.equal(statusOf(next, keys, now), 'next')
  t.equal(statusOf(active, keys, now), 'active')
  t.equal(statusOf(old, keys, now), 'retired')
})

t.test('rotation: due a lead before the period ends, the next key signing when it does', async (t) => {
  const signer = { kid: 'a', activatesAt: 0 }
  t.equal(rotationDue([signer], PERIOD - NEXT_KEY_LEAD_MS - 1, PERIOD), null, 'not before')
  t.equal(rotationDue([signer], PERIOD - NEXT_KEY_LEAD_MS, PERIOD), PERIOD, 'due: it signs at the end of the period')
  const late = PERIOD + 5 * DAY_MS
  t.equal(rotationDue([signer], late, PERIOD), late + NEXT_KEY_LEAD_MS, 'found late: never less than the lead ahead')
  t.equal(rotationDue([signer, { kid: 'b', activatesAt: PERIOD }], PERIOD - MINUTE, PERIOD), null, 'a next key waits')
  t.equal(rotationDue([], PERIOD, PERIOD), null, 'nothing to rotate')
})

t.test('a retired key stays until what it signed expired: 3600 s tokens, 300 s assertions, 30 s leeway', async (t) => {
  t.equal(RETIRED_KEY_GRACE_MS, 3_630_000)
  t.ok(NEXT_KEY_LEAD_MS >= 10 * MINUTE, 'a next key is published at least 10 minutes ahead')
})
