// Hostile input, generated (fast-check), the acting header: any value and any count of it, on
// reads and writes, as parent and sub-account key (docs/api.md).
// The deployment under attack and the checks every case shares: test/helpers/hostile-deployment.ts.
import t from 'tap'
import fc from 'fast-check'
import { actingOutcome, active, checkAfterwards, checkOutcome, controlChar } from '../helpers/hostile-deployment.js'
import { foreign, gone, headerText, mutated, owner, property, seedFor, send } from '../helpers/hostile-deployment.js'
import { sibling, single, stranger, subKey } from '../helpers/hostile-deployment.js'
import { type HeaderLines, runs, show } from '../helpers/hostile.js'

t.test('the acting header: any value, any count, on reads and writes (docs/api.md)', async (t) => {
  const known = [
    'self',
    owner.id,
    owner.id.toUpperCase(),
    active.id,
    active.id.toUpperCase(),
    sibling.id,
    gone.id,
    foreign.id,
    stranger.id,
    'ext:acme-eu',
    'ext:acme-us',
    'ext:gone',
    'ext:foreign-only',
    'ext:',
    'SELF',
    '00000000-0000-4000-8000-000000000000',
  ]
  const value = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...known) },
    { weight: 5, arbitrary: mutated(fc.constantFrom(...known)) },
    { weight: 1, arbitrary: fc.uuid() },
    { weight: 2, arbitrary: fc.stringMatching(/^ext:[A-Za-z0-9._:@/+-]{0,130}$/) },
    { weight: 3, arbitrary: headerText(60) },
    { weight: 1, arbitrary: fc.tuple(headerText(10), controlChar, headerText(10)).map(([a, c, b]) => a + c + b) },
  )
  const lines = fc.oneof(
    { weight: 1, arbitrary: fc.constant([] as string[]) },
    { weight: 6, arbitrary: fc.array(value, { minLength: 1, maxLength: 1 }) },
    {
      weight: 2,
      arbitrary: fc.array(value, { minLength: 2, maxLength: 3 }),
    },
  )
  const seed = seedFor(t, 1)
  await property(
    t,
    'acting header',
    seed,
    runs(1000),
    [fc.constantFrom<'owner' | 'sub'>('owner', 'owner', 'sub'), fc.constantFrom('GET', 'POST', 'DELETE'), lines],
    async (keyOf, method, values) => {
      const key = keyOf === 'owner' ? owner.apiKey : subKey.api_key
      const headers: HeaderLines = [
        ['Authorization', `Bearer ${key}`],
        ...values.map((v): [string, string] => ['X-Service-Acting-Tenant', v]),
      ]
      const { marker, sent } = send(method, `/acting/${keyOf}`, headers)
      const res = await single(marker, sent)
      try {
        checkOutcome(res, marker, method, actingOutcome(keyOf, method, values))
      } catch (err) {
        throw new Error(
          `${method} as ${keyOf} with ${values.map(show).join(' + ') || 'no header'}: ${(err as Error).message}`,
        )
      }
    },
  )
})

checkAfterwards()
