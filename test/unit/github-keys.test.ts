// GitHub's secret scanning keys as the gateway keeps them (src/secret-scanning/github-keys.ts):
// kept an hour, fetched again at most once a minute for an unknown identifier, the keys held
// before serving while a fetch fails, and 503 scanner_keys_unavailable with none at all. The
// document comes from a function here and the clock is the test's: no network, no waiting.
import { generateKeyPairSync, sign } from 'node:crypto'
import t from 'tap'
import { GitHubKeys, KEYS_TTL_MS, REFETCH_MIN_MS } from '../../src/secret-scanning/github-keys.js'

const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' })
const document = {
  public_keys: [
    { key_identifier: 'k1', key: pair.publicKey.export({ type: 'spki', format: 'pem' }), is_current: true },
  ],
}
const body = Buffer.from('[{"token":"tgw_x","type":"t","url":"u","source":"content"}]')
const signature = sign('sha256', body, pair.privateKey).toString('base64')

function keys(answer: () => unknown) {
  let now = 1_000_000
  let fetches = 0
  const held = new GitHubKeys({
    url: 'https://example.invalid/keys',
    now: () => now,
    onFetch: () => fetches++,
    fetchDocument: async () => answer(),
  })
  return { held, advance: (ms: number) => (now += ms), fetches: () => fetches }
}

t.test('a signature verifies under its key; another body or key does not', async (t) => {
  const { held } = keys(() => document)
  t.ok(await held.verify(body, 'k1', signature))
  t.notOk(await held.verify(Buffer.from('[]'), 'k1', signature), 'another body')
  t.notOk(await held.verify(body, 'k2', signature), 'an unknown identifier')
  t.notOk(await held.verify(body, 'k1', 'not base64 DER'), 'garbage')
})

t.test('kept an hour; an unknown identifier fetches again at most once a minute', async (t) => {
  const { held, advance, fetches } = keys(() => document)
  await held.key('k1')
  await held.key('k1')
  t.equal(fetches(), 1, 'fetched once')
  await held.key('nope')
  await held.key('nope')
  t.equal(fetches(), 1, 'an unknown identifier within the minute: not again')
  advance(REFETCH_MIN_MS)
  await held.key('nope')
  await held.key('nope')
  t.equal(fetches(), 2, 'after a minute: once')
  advance(KEYS_TTL_MS)
  await held.key('k1')
  t.equal(fetches(), 3, 'after an hour, even a known one')
})

t.test('a failing fetch: the keys held serve; with none, 503 scanner_keys_unavailable', async (t) => {
  let failing = false
  const { held, advance } = keys(() => {
    if (failing) throw new Error('connect ECONNREFUSED')
    return document
  })
  t.ok(await held.key('k1'))
  failing = true
  advance(KEYS_TTL_MS)
  t.ok(await held.key('k1'), 'the key held before still serves')
  const none = keys(() => {
    throw new Error('connect ECONNREFUSED')
  })
  await t.rejects(none.held.key('k1'), { code: 'scanner_keys_unavailable', status: 503 })
  await t.resolves(none.held.key('k1'), 'within the minute it is not asked again')
})
