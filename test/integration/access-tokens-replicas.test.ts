// Access tokens across two replicas (docs/credentials.md): gateways A and B share one database
// (and so the signing keys stored there) and one Redis prefix. A token issued by
// A works on B; revoking its key, or deactivating its sub-account, through A ends the token on B
// within 1 s, as it ends the key, though B remembers the token and its last second's admissions.
// In-process entries live a minute here, so only the invalidation message can explain B's change.
import t, { type Test } from 'tap'
import {
  type GatewayOptions,
  metricValue,
  recentAdmissions,
  type TestGateway,
  startReplicas,
} from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { redisClient, untilSubscribed } from '../helpers/redis.js'
import { accessToken, type ClientKey, clientKey } from '../helpers/tokens.js'
import { startUpstream } from '../helpers/upstream.js'

const SLOW_LOCAL_EXPIRY: GatewayOptions['cacheTimings'] = {
  localTtlMs: 60_000,
  negativeTtlMs: 60_000,
  reinvalidateAfterMs: 60_000,
}
const upstream = await startUpstream(t)
const [a, b] = (await startReplicas(t, 2, { upstreamUrl: upstream.url, cacheTimings: SLOW_LOCAL_EXPIRY })) as [
  TestGateway,
  TestGateway,
]

// A change made before B listens would be lost to it: start once both are subscribed.
const redis = redisClient(t)
await untilSubscribed(redis, a.redisKeyPrefix!, 2)

const parent = await a.createParent()
const read = (gw: TestGateway, token: string) => callAs(gw.url, token, { path: '/v1/orders/1' })
const valid = (gw: TestGateway) => metricValue(gw.app, 'tgw_token_verifications_total', { outcome: 'valid' })

/** A client whose token B has verified, remembered and admitted from its last second's memory. */
async function warmOnB(t: Test): Promise<{ c: ClientKey; token: string }> {
  const c = await clientKey(a.url, parent)
  const token = await accessToken(a.url, c)
  const [checks, admitted] = [await valid(b), await recentAdmissions(b)]
  for (let i = 0; i < 3; i++) t.equal((await read(b, token)).status, 200, `B admits A's token (${i + 1})`)
  t.equal((await valid(b)) - checks, 1, 'B checked its signature once')
  t.ok((await recentAdmissions(b)) - admitted >= 1, "B admitted it again from its last second's memory")
  return { c, token }
}

t.test('a key revoked through A: its token is refused by B within 1 s', async (t) => {
  const { c, token } = await warmOnB(t)
  const revoke = await callAs(a.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${c.subId}/api-keys/${c.keyId}/revoke`,
    acting: 'self',
  })
  t.equal(revoke.status, 200, 'revoked through A')
  const took = await eventually(5_000, async () => (await read(b, token)).status === 401)
  t.not(took, null, 'B refuses the token')
  t.ok(took !== null && took <= 1_000, `within 1 s (${took} ms)`)
  const hits = upstream.received.length
  t.equal((await read(b, token)).json().code, 'unauthenticated', 'and goes on refusing it')
  t.equal(upstream.received.length, hits, 'without reaching the upstream')
})

t.test('a sub-account deactivated through A: its token gets 403 from B within 1 s', async (t) => {
  const { c, token } = await warmOnB(t)
  const deactivate = await callAs(a.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${c.subId}/deactivate`,
    acting: 'self',
  })
  t.equal(deactivate.status, 200, 'deactivated through A')
  const took = await eventually(5_000, async () => (await read(b, token)).status === 403)
  t.not(took, null, 'B refuses the token')
  t.ok(took !== null && took <= 1_000, `within 1 s (${took} ms)`)
  t.equal((await read(b, token)).json().code, 'tenant_deactivated')
})
