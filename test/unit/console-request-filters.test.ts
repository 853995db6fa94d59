// The console's Requests screen reads its filters from the address: what a link or a hand-typed
// hash can put there, and what of it the console refuses before calling the API.
import t from 'tap'
import {
  dayBounds,
  fromUtcField,
  hasFilters,
  isUuid,
  NO_FILTERS,
  parseFilters,
  requestsHash,
  toUtcField,
  usageRequestsHash,
} from '../../src/console/ui/request-filters.js'

const SUB = '0b5c7c9e-3f7e-4c1a-9d59-6c0f3f0e8a11'
const KEY = 'c2a1f7d4-8b6e-4e0a-a3c5-1f2e3d4c5b6a'

t.test('parseFilters: every filter the API takes, trimmed; other names ignored', async (t) => {
  const { filters, invalid } = parseFilters(
    `sub_account_id=${SUB}&key_id=${KEY}&status=5xx&code=rate_limited&route=%2Fapi&since=2026-11-23T00%3A00%3A00.000Z&until=2026-11-24T00:00:00Z&limit=99&cursor=abc&other=1`,
  )
  t.same(filters, {
    sub_account_id: SUB,
    key_id: KEY,
    status: '5xx',
    code: 'rate_limited',
    route: '/api',
    since: '2026-11-23T00:00:00.000Z',
    until: '2026-11-24T00:00:00Z',
  })
  t.same(invalid, [])
  t.same(parseFilters('').filters, NO_FILTERS, 'no query: no filter')
  t.equal(parseFilters('status=+404+').filters.status, '404', 'trimmed (a + is a space)')
  t.equal(parseFilters('status=404&status=500').filters.status, '404', 'the first of a repeated name')
})

t.test('parseFilters: ids that are not UUIDs are named, kept for the form, never sent', async (t) => {
  for (const odd of ['..', '%2e%2e', '../events', `${SUB}/..`, `${SUB}x`, '%E0%A4%A', 'a'.repeat(36)]) {
    const { filters, invalid } = parseFilters(`sub_account_id=${odd}&key_id=${odd}`)
    t.same(
      invalid.map((e) => e.path),
      ['sub_account_id', 'key_id'],
      `${odd}: refused`,
    )
    t.not(filters.sub_account_id, '', `${odd}: kept to be corrected`)
  }
  t.same(parseFilters(`key_id=${KEY.toUpperCase()}`).invalid, [], 'a UUID in capitals is one')
  t.same(parseFilters('status=%E0%A4%A&code=<b>').invalid, [], 'other values are for the API to judge')
})

t.test('requestsHash: the set filters, in a fixed order, encoded; parseFilters reads it back', async (t) => {
  t.equal(requestsHash({}), '#/requests')
  t.equal(requestsHash({ ...NO_FILTERS }), '#/requests', 'empty values left out')
  t.equal(requestsHash({ status: '4xx', sub_account_id: SUB }), `#/requests?sub_account_id=${SUB}&status=4xx`)
  const odd = { code: 'a&b=c#d', route: '/api?x', since: '2026-11-23T00:00:00+01:00' }
  const hash = requestsHash(odd)
  t.notOk(hash.slice(1).includes('#'), 'a # in a value cannot end the address')
  t.same(parseFilters(hash.replace(/^#\/requests\?/, '')).filters, { ...NO_FILTERS, ...odd }, 'a round trip')
})

t.test('hasFilters', async (t) => {
  t.notOk(hasFilters(NO_FILTERS))
  t.ok(hasFilters({ ...NO_FILTERS, until: '2026-11-24T00:00:00Z' }))
})

t.test('dayBounds and usageRequestsHash: a UTC day, the next day its end', async (t) => {
  t.same(dayBounds('2026-11-23'), { since: '2026-11-23T00:00:00.000Z', until: '2026-11-24T00:00:00.000Z' })
  t.same(dayBounds('2026-12-31'), { since: '2026-12-31T00:00:00.000Z', until: '2027-01-01T00:00:00.000Z' })
  t.same(dayBounds('2028-02-28').until, '2028-02-29T00:00:00.000Z', 'a leap year')
  t.same(parseFilters(usageRequestsHash(SUB, '2026-11-23', '429').split('?')[1]!).filters, {
    ...NO_FILTERS,
    sub_account_id: SUB,
    status: '429',
    since: '2026-11-23T00:00:00.000Z',
    until: '2026-11-24T00:00:00.000Z',
  })
  t.notMatch(usageRequestsHash(null, '2026-11-23', '2xx'), /sub_account_id/, 'the whole account: no sub-account')
})

t.test('the UTC fields of since and until', async (t) => {
  t.equal(toUtcField('2026-11-23T16:05:32.123Z'), '2026-11-23T16:05:32')
  t.equal(toUtcField('2026-11-23T17:05:32+01:00'), '2026-11-23T16:05:32', 'shown in UTC')
  t.equal(toUtcField(''), '')
  t.equal(toUtcField('yesterday'), '', 'no instant: an empty field')
  t.equal(fromUtcField('2026-11-23T16:05'), '2026-11-23T16:05:00.000Z', 'minutes only: read as UTC')
  t.equal(fromUtcField('2026-11-23T16:05:32'), '2026-11-23T16:05:32.000Z')
  t.equal(fromUtcField(''), '')
  t.equal(fromUtcField('nonsense'), 'nonsense', 'left for the API to refuse')
  t.ok(isUuid(SUB))
  t.notOk(isUuid(`${SUB} `))
})
