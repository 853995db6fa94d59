// Dates the store cannot hold are the client's fault (docs/api.md): year 0000, or a year-0001 time
// whose offset puts it in year 0 once in UTC, or 9999 carried into 10000, are 400
// validation_failed on every route that takes a date, never 500. Over real sockets, real Postgres.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'

const gw = await startGateway(t)
const parent = await gw.createParent()
const get = (path: string) => callAs(gw.url, parent.apiKey, { path, acting: 'self' })

const OUT_OF_RANGE = [
  '0000-01-01T00:00:00Z',
  '0000-12-31T23:59:59.999Z',
  '0001-01-01T00:30:00+01:00',
  '0001-01-01T00:00:00.000+00:01',
  '9999-12-31T23:30:00-01:00',
]

for (const name of ['since', 'until']) {
  for (const value of OUT_OF_RANGE) {
    t.test(`events?${name}=${value} is 400 validation_failed`, async (t) => {
      const res = await get(`/v1/sub-accounts/events?${name}=${encodeURIComponent(value)}`)
      t.equal(res.status, 400, res.body)
      t.equal(res.json().code, 'validation_failed')
      t.match(JSON.stringify(res.json().errors), /0001-01-01T00:00:00Z/, 'the error says which range is accepted')
    })
  }
}

t.test('events: the first and the last instant of the range are accepted', async (t) => {
  const res = await get(
    `/v1/sub-accounts/events?since=0001-01-01T00:00:00Z&until=${encodeURIComponent('9999-12-31T23:59:59+00:00')}`,
  )
  t.equal(res.status, 200, res.body)
})

for (const name of ['from', 'to']) {
  for (const value of ['0000-01-01', '0000-02-29', ...OUT_OF_RANGE, '0001-01-01T00:30:00 01:00']) {
    t.test(`usage?${name}=${value} is 400 validation_failed`, async (t) => {
      const other = name === 'from' ? 'to=0001-01-31' : 'from=0001-01-01'
      // A `+` left unencoded arrives as a space: the last case sends it so.
      const encoded = value.includes(' ') ? value.replace(' ', '+') : encodeURIComponent(value)
      const res = await get(`/v1/sub-accounts/usage?${name}=${encoded}&${other}`)
      t.equal(res.status, 400, res.body)
      t.equal(res.json().code, 'validation_failed')
      t.match(JSON.stringify(res.json().errors), /0001-01-01/, 'the error says which range is accepted')
    })
  }
}

t.test('usage: year 0001 itself, and 9999, are dates like any other', async (t) => {
  const first = await get('/v1/sub-accounts/usage?from=0001-01-01&to=0001-12-31')
  t.equal(first.status, 200, first.body)
  t.match(first.json(), { from: '0001-01-01', to: '0001-12-31', data: [] })
  const last = await get(`/v1/sub-accounts/usage?from=9999-01-01&to=${encodeURIComponent('9999-12-31T23:00:00-00:59')}`)
  t.equal(last.status, 200, last.body)
  t.match(last.json(), { from: '9999-01-01', to: '9999-12-31' })
})

t.test('a key minted to expire in year 0000, or past 9999, is 400 validation_failed', async (t) => {
  const sub = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'dated' },
  })
  t.equal(sub.status, 201, sub.body)
  for (const expiresAt of ['0000-01-01T00:00:00Z', '9999-12-31T23:30:00-01:00']) {
    const res = await callAs(gw.url, parent.apiKey, {
      method: 'POST',
      path: `/v1/sub-accounts/${sub.json().id}/api-keys`,
      acting: 'self',
      json: { name: 'k', scopes: ['sub_accounts:read'], expires_at: expiresAt },
    })
    t.equal(res.status, 400, res.body)
    t.equal(res.json().code, 'validation_failed')
  }
})
