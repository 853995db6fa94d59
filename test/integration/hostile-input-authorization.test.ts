// Hostile input, generated (fast-check), Authorization: any value and any count of it, live keys
// in every spelling of the scheme (docs/api.md).
// The deployment under attack and the checks every case shares: test/helpers/hostile-deployment.ts.
import t from 'tap'
import fc from 'fast-check'
import { active, base62Body, checkAfterwards, checkOutcome, controlChar } from '../helpers/hostile-deployment.js'
import { HEADER_CONTROL, headerText, mutated, type Outcome, owner, ows } from '../helpers/hostile-deployment.js'
import { property, revokedKey, seedFor, send, single, subKey } from '../helpers/hostile-deployment.js'
import { wellFormedUnknownKey } from '../helpers/hostile-deployment.js'
import { type HeaderLines, runs, show } from '../helpers/hostile.js'

t.test('Authorization: any value, any count (docs/api.md)', async (t) => {
  const badChecksum = owner.apiKey.slice(0, -1) + (owner.apiKey.endsWith('a') ? 'b' : 'a')
  const tokens = fc.oneof(
    fc.constantFrom(
      owner.apiKey,
      subKey.api_key,
      revokedKey.api_key,
      subKey.client_secret as string,
      badChecksum,
      'tgw_short',
      '',
    ),
    mutated(fc.constantFrom(owner.apiKey, subKey.api_key)),
    wellFormedUnknownKey,
    base62Body.map((body) => `tgw_${body}XXXXXX`),
    headerText(80),
  )
  const scheme = fc.constantFrom('Bearer', 'bearer', 'BEARER', 'BeArEr', 'Bearer:', 'Basic', 'Token', 'Bearer,', '')
  const gap = fc.constantFrom(' ', '  ', '\t', '', ' \t ')
  const tail = fc.constantFrom('', ' ', '  ', '\t', ' x', ',')
  // Live keys in every spelling of the scheme and spacing, so that acceptance is exercised too.
  const liveForms = fc
    .tuple(
      fc.constantFrom('Bearer', 'bearer', 'BEARER', 'bEARER'),
      fc.constantFrom(' ', '  ', '   '),
      fc.constantFrom(owner.apiKey, subKey.api_key),
      fc.constantFrom('', ' ', '  ', '\t', ' \t'),
      fc.constantFrom('', ' ', '\t'),
    )
    .map(([s, g, k, e, lead]) => `${lead}${s}${g}${k}${e}`)
  const value = fc.oneof(
    { weight: 3, arbitrary: liveForms },
    { weight: 6, arbitrary: fc.tuple(scheme, gap, tokens, tail).map(([s, g, k, e]) => `${s}${g}${k}${e}`) },
    { weight: 2, arbitrary: headerText(100) },
    { weight: 1, arbitrary: fc.tuple(fc.constantFrom(`Bearer ${owner.apiKey}`), controlChar).map(([v, c]) => v + c) },
  )
  const lines = fc.oneof(
    { weight: 1, arbitrary: fc.constant([] as string[]) },
    { weight: 7, arbitrary: fc.array(value, { minLength: 1, maxLength: 1 }) },
    {
      weight: 2,
      arbitrary: fc.array(value, { minLength: 2, maxLength: 3 }),
    },
  )
  const live = new Map<string, string>([
    [owner.apiKey, owner.id],
    [subKey.api_key, active.id],
  ])
  const seed = seedFor(t, 2)
  await property(
    t,
    'Authorization',
    seed,
    runs(800),
    [lines, fc.constantFrom('GET', 'PUT')],
    async (values, method) => {
      const headers: HeaderLines = values.map((v): [string, string] => ['Authorization', v])
      // Acting as self: the owner's writes need the header, and it is not what is under test here.
      headers.push(['X-Service-Acting-Tenant', 'self'])
      const { marker, sent } = send(method, '/auth/check', headers)
      const res = await single(marker, sent)
      let outcome: Outcome
      if (values.some((v) => HEADER_CONTROL.test(v))) outcome = { parser: true }
      else if (values.length !== 1) outcome = { refuse: { status: 401, code: 'unauthenticated' } }
      else {
        const match = /^bearer +(\S+) *$/i.exec(ows(values[0]!))
        const tenant = match ? live.get(match[1]!) : undefined
        outcome =
          tenant === undefined
            ? { refuse: { status: 401, code: 'unauthenticated' } }
            : { pass: { resolved: tenant, caller: tenant } }
      }
      try {
        checkOutcome(res, marker, method, outcome)
        if ('refuse' in outcome && res.header('www-authenticate') !== 'Bearer')
          throw new Error(`WWW-Authenticate: ${res.header('www-authenticate')}`)
      } catch (err) {
        throw new Error(
          `${method} with ${values.map(show).join(' + ') || 'no Authorization'}: ${(err as Error).message}`,
        )
      }
    },
  )
})

checkAfterwards()
