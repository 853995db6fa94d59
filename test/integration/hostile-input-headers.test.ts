// Hostile input, generated (fast-check), header counts and sizes: up to 200 headers, around the
// limits of 100 fields and 16 KiB (docs/api.md).
// The deployment under attack and the checks every case shares: test/helpers/hostile-deployment.ts.
import t from 'tap'
import fc from 'fast-check'
import { catchAll, checkAfterwards, chr, healthzStatus, owner, ows, port } from '../helpers/hostile-deployment.js'
import { property, refusedIssue, seedFor, send, single, upstreamsGot } from '../helpers/hostile-deployment.js'
import { expectNo, type HeaderLines, isParserRefusal, requestBytes, runs, show } from '../helpers/hostile.js'
import { UPSTREAM_MARK } from '../helpers/hostile.js'

t.test('header counts and sizes: up to 200 headers, around the limits of 100 fields and 16 KiB', async (t) => {
  const name = fc.oneof(
    { weight: 8, arbitrary: fc.stringMatching(/^x-[a-z0-9-]{1,16}$/) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        'X-Service-Resolved-Tenant',
        'x-service-caller-tenant',
        'X-Service-Key-Id',
        'X-SERVICE-SCOPES',
        'x-service-x',
        'X-Forwarded-For',
        'Accept',
        'Cookie',
        'Keep-Alive',
        'TE',
        'Upgrade',
        'Proxy-Authorization',
        'Trailer',
      ),
    },
  )
  const smallValue = fc.array(fc.integer({ min: 0x21, max: 0x7e }).map(chr), { maxLength: 40 }).map((cs) => cs.join(''))
  const bigValue = fc.integer({ min: 500, max: 9000 }).map((n) => 'v'.repeat(n))
  const header = fc.tuple(name, fc.oneof({ weight: 20, arbitrary: smallValue }, { weight: 1, arbitrary: bigValue }))
  const headers = fc.oneof(
    { weight: 3, arbitrary: fc.array(header, { maxLength: 40 }) },
    // Around the limit of 100 fields (4 of them the test's own: Host, X-Request-Id, Authorization, Connection).
    { weight: 2, arbitrary: fc.array(header, { minLength: 90, maxLength: 100 }) },
    { weight: 1, arbitrary: fc.array(header, { minLength: 150, maxLength: 200 }) },
  )
  const connection = fc.option(
    fc.constantFrom(
      'x-service-resolved-tenant, x-service-key-id',
      'X-Service-Scopes',
      'x-request-id, x-forwarded-for',
      'keep-alive',
    ),
    { nil: undefined },
  )
  // docs/api.md: more than 100 header fields, or 16 KiB of head, are 431.
  const LIMIT = 16 * 1024
  const MAX_FIELDS = 100
  const seed = seedFor(t, 5)
  let refused431 = 0
  let passed = 0
  await property(t, 'header counts and sizes', seed, runs(300), [headers, connection], async (extra, conn) => {
    const lines: HeaderLines = [['Authorization', `Bearer ${owner.apiKey}`], ...extra]
    if (conn !== undefined) lines.push(['Connection', conn])
    const { marker, sent } = send('GET', '/headers/size', lines)
    const fieldLines: HeaderLines = [
      ['Host', `127.0.0.1:${port}`],
      ['X-Request-Id', marker],
      ...lines,
      ['Connection', 'close'],
    ]
    const headBytes = requestBytes({ method: 'GET', target: '/headers/size', headers: fieldLines }).length
    const fields = fieldLines.length
    const res = await single(marker, sent)
    const what = `${fields} header fields, ${headBytes} bytes of head -> ${res.status} ${res.body.slice(0, 120)}`
    if (res.status === 431 || res.status === 400) {
      if (!isParserRefusal(res)) expectNo(refusedIssue(res, marker, 'GET'), what)
      if (headBytes < LIMIT - 1024 && fields <= MAX_FIELDS)
        throw new Error(`${what}: refused although the head is well under 16 KiB and 100 fields`)
      if (upstreamsGot(marker) > 0) throw new Error(`${what}: refused, yet the upstream received it`)
      refused431 += 1
      return
    }
    if (headBytes > LIMIT + 1024) throw new Error(`${what}: a head over 16 KiB was accepted`)
    if (fields > MAX_FIELDS) throw new Error(`${what}: more than 100 header fields were accepted`)
    if (res.status !== 200 || res.header(UPSTREAM_MARK) !== 'catch-all')
      throw new Error(`${what}: expected the catch-all's 200`)
    passed += 1
    const got = catchAll.byMarker(marker)[0]!
    // Trusted headers are the gateway's, whatever was sent or named by Connection (GHSA-gwhp-pf74-vj37).
    if (got.headers['x-service-resolved-tenant'] !== owner.id || got.headers['x-service-caller-tenant'] !== owner.id)
      throw new Error(`${what}: the identity headers are not the gateway's`)
    if (got.headers['x-request-id'] !== marker)
      throw new Error(`${what}: X-Request-Id ${String(got.headers['x-request-id'])}`)
    const serviceNames = got.rawHeaders
      .filter((_, i) => i % 2 === 0)
      .map((n) => n.toLowerCase())
      .filter((n) => n.startsWith('x-service-'))
    if (serviceNames.length !== 4) throw new Error(`${what}: X-Service-* headers upstream: ${serviceNames.join(', ')}`)
    // Custom end-to-end headers arrive, repeated ones joined in order.
    const sentValues = new Map<string, string[]>()
    for (const [n, v] of extra)
      if (n.startsWith('x-') && !n.startsWith('x-service-')) sentValues.set(n, [...(sentValues.get(n) ?? []), v])
    for (const [n, values] of sentValues) {
      if (conn?.toLowerCase().split(/, */).includes(n)) continue
      const arrived = got.headers[n]
      // Node joins repeated lines with ", "; the upstream's parser then trims the whole value.
      if (arrived !== ows(values.join(', ')))
        throw new Error(`${what}: ${n} arrived as ${show(String(arrived)).slice(0, 80)}`)
    }
  })
  t.comment(`header sizes: ${passed} forwarded, ${refused431} refused (431)`)
  t.equal(await healthzStatus(), 200, 'the gateway still answers after the oversized heads')
})

checkAfterwards()
