// Hostile input, generated (fast-check), query strings: byte for byte to the upstream, validated
// by management, nothing written (docs/api.md).
// The deployment under attack and the checks every case shares: test/helpers/hostile-deployment.ts.
import t from 'tap'
import fc from 'fast-check'
import { active, catchAll, checkAfterwards, owner, property, refusedIssue } from '../helpers/hostile-deployment.js'
import { seedFor, send, single, sql, upstreamsGot } from '../helpers/hostile-deployment.js'
import { expectNo, isParserRefusal, runs, show, UPSTREAM_MARK } from '../helpers/hostile.js'

t.test('query strings reach the upstream byte for byte, and management validates them', async (t) => {
  const queryChar = fc.oneof(
    { weight: 10, arbitrary: fc.constantFrom(..."abcXYZ019-._~!$&'()*+,;=:@/?".split('')) },
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        '%',
        '%zz',
        '%2e%2e',
        '..',
        '//',
        '#',
        '%00',
        '%25',
        '%2F',
        '%5C',
        '\\',
        '[',
        ']',
        '{',
        '}',
        '|',
        '^',
        '`',
        '"',
        '<',
        '>',
        '&&',
        '==',
        'limit',
        'cursor',
        'status',
        'external_id',
        'from',
        'to',
        '1',
        '100',
        '101',
        '-1',
        'active',
        '2026-11-01',
        'czoxMjM',
      ),
    },
    // Bytes a request line cannot carry (a space would end the target): Node's parser refuses them.
    { weight: 1, arbitrary: fc.constantFrom('\u0001', '\u007f', '\u00e9', '\u00ff') },
  )
  const query = fc.array(queryChar, { maxLength: 30 }).map((cs) => cs.join(''))
  const base = fc.constantFrom(
    '/q/proxied',
    '/v1/sub-accounts',
    '/v1/sub-accounts/usage',
    `/v1/sub-accounts/${active.id}/api-keys`,
    '/v1/shipments/1',
  )
  const seed = seedFor(t, 4)
  const rows = async () =>
    (await sql`select (select count(*) from tenants)::int as t, (select count(*) from api_keys)::int as k`)[0]!
  const before = await rows()
  await property(t, 'query strings', seed, runs(500), [base, query], async (path, q) => {
    const target = `${path}?${q}`
    const { marker, sent } = send('GET', target, [['Authorization', `Bearer ${owner.apiKey}`]])
    const res = await single(marker, sent)
    const what = `GET ${show(target)} -> ${res.status} ${res.body.slice(0, 160)}`
    if (isParserRefusal(res)) {
      expectNo(upstreamsGot(marker) > 0 ? 'an upstream received it' : null, what)
      return
    }
    if (path === '/q/proxied') {
      // A '#' has no place in a request-target (RFC 9112 §3.2): refusing it is as good as passing it on.
      if (q.includes('#') && res.status === 400 && ['bad_path', 'bad_request'].includes(res.json().code)) {
        expectNo(refusedIssue(res, marker, 'GET'), what)
        return
      }
      if (res.status !== 200 || res.header(UPSTREAM_MARK) !== 'catch-all')
        throw new Error(`${what}: expected the catch-all's 200`)
      const got = catchAll.byMarker(marker)
      if (got.length !== 1 || got[0]!.url !== target)
        throw new Error(`${what}: the upstream received ${got.map((g) => show(g.url)).join(', ') || 'nothing'}`)
      return
    }
    if (path === '/v1/shipments/1') {
      expectNo(refusedIssue(res, marker, 'GET', { status: 403, code: 'insufficient_scope' }), what)
      return
    }
    // Management reads: a page, or 400 naming the bad parameter; never an upstream.
    if (upstreamsGot(marker) > 0) throw new Error(`${what}: a management read reached an upstream`)
    if (res.status === 200) return
    expectNo(refusedIssue(res, marker, 'GET'), what)
    const code = res.json().code
    if (res.status !== 400 || !['validation_failed', 'bad_request'].includes(code))
      throw new Error(`${what}: expected 400 validation_failed or bad_request`)
  })
  t.same(await rows(), before, 'reads wrote no tenant and no key')
})

checkAfterwards()
