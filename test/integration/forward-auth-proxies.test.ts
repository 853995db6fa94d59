// nginx and Caddy in front of a real upstream, the gateway deciding on AUTHZ_PORT, each run from
// the configuration docs/forward-auth.md shows (docs/examples/forward-auth/, helpers/front-proxies.ts):
// a client through them gets exactly what it gets through the gateway's own proxy (status, body,
// Retry-After, WWW-Authenticate, RateLimit fields, and the trusted headers its upstream
// receives), for an allowed request and each refusal; no X-Service-* of the client's, any name,
// case or count, reaches the upstream, while its acting header still reaches the decision; a
// revoked key is refused at once; an allow-list reads the client's address from the
// X-Forwarded-For the proxy in front sends, under TRUSTED_PROXIES; a keyless CORS preflight is
// refused, never sent on.
import t, { type Test } from 'tap'
import { type FrontProxy, startCaddy, startNginx } from '../helpers/front-proxies.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse, rawRequest } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { type ReceivedRequest, startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t, (request, response) => {
  response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ path: request.url }))
})
const gw = await startGateway(t, {
  authz: true,
  // The proxies in front, and the clients (127.0.0.2, 127.0.0.3…) are other addresses.
  env: { TRUSTED_PROXIES: '127.0.0.1/32' },
  gatewayConfig: {
    routes: [
      { prefix: '/v1/things', upstream: upstream.url, scopes: { read: ['things:read'], write: ['things:write'] } },
      // Called from browsers on another origin: PORT answers its preflights, a decision never allows one.
      {
        prefix: '/v1/browser',
        upstream: upstream.url,
        scopes: { read: ['things:read'] },
        cors: { origins: ['https://app.example.com'], methods: ['GET'] },
      },
    ],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })
const proxies: Record<string, FrontProxy> = {
  nginx: await startNginx(t, gw.authzUrl, upstream.url),
  caddy: await startCaddy(t, gw.authzUrl, upstream.url),
}

async function manage(method: string, path: string, json?: unknown): Promise<RawResponse> {
  return callAs(gw.url, parent.apiKey, { method, path: `/v1/sub-accounts${path}`, acting: 'self', json })
}

async function subAccount(
  name: string,
  rate: number,
  keyPolicy?: unknown,
  scopes = ['things:read'],
): Promise<{ id: string; key: string; keyId: string }> {
  const made = await manage('POST', '', {
    name,
    limits: { rate: { requests: rate, per_seconds: 600 } },
    ...(keyPolicy === undefined ? {} : { key_policy: keyPolicy }),
  })
  if (made.status !== 201) throw new Error(`create ${name}: ${made.status} ${made.body}`)
  const id = made.json().id as string
  const key = await manage('POST', `/${id}/api-keys`, { name: 'k', scopes })
  if (key.status !== 201) throw new Error(`key for ${name}: ${key.status} ${key.body}`)
  return { id, key: key.json().api_key as string, keyId: key.json().id as string }
}

let sent = 0
/** The same request through the gateway's proxy and through `front`, with one request id. */
async function both(
  front: FrontProxy,
  options: { method?: string; path: string; headers: [string, string][]; localAddress?: string; body?: string },
): Promise<{
  gateway: RawResponse
  front: RawResponse
  upstreamSaw: { gateway?: ReceivedRequest; front?: ReceivedRequest }
}> {
  const id = `cmp-${++sent}`
  const headers: [string, string][] = [...options.headers, ['X-Request-Id', id]]
  const before = upstream.received.length
  const gateway = await rawRequest(gw.url, { ...options, headers })
  const middle = upstream.received.length
  const viaFront = await rawRequest(front.url, { ...options, headers })
  return {
    gateway,
    front: viaFront,
    upstreamSaw: {
      gateway: upstream.received[before],
      front: middle < upstream.received.length ? upstream.received[middle] : undefined,
    },
  }
}

/** The headers an upstream takes on trust: every name that reads as X-Service-*, and the request id. */
function trusted(received: ReceivedRequest | undefined): Record<string, string | string[] | undefined> {
  if (received === undefined) return {}
  const out: Record<string, string | string[] | undefined> = {}
  for (const [name, value] of Object.entries(received.headers))
    if (/^x[-_.]service[-_.]/.test(name) || name === 'x-request-id') out[name] = value
  return out
}

const FIELDS = ['content-type', 'retry-after', 'www-authenticate', 'ratelimit-policy', 'x-request-id'] as const

function sameAnswer(t: Test, name: string, a: RawResponse, b: RawResponse): void {
  t.equal(b.status, a.status, `${name}: status`)
  t.equal(b.body, a.body, `${name}: body`)
  for (const field of FIELDS)
    t.same(b.headers[field], a.headers[field], `${name}: ${field} ${JSON.stringify(b.headers[field])}`)
  t.equal(b.headers.ratelimit === undefined, a.headers.ratelimit === undefined, `${name}: RateLimit`)
}

for (const [name, front] of Object.entries(proxies)) {
  t.test(`${name}: allowed, and each refusal, as through the gateway`, async (t) => {
    const sub = await subAccount(`${name}-roomy`, 1000)
    // The path and query as the client sent them (nginx hands an allowed request to a named location).
    const allowed = await both(front, {
      path: '/v1/things/%7Ea?x=%20y',
      headers: [['Authorization', `Bearer ${sub.key}`]],
    })
    sameAnswer(t, 'allowed', allowed.gateway, allowed.front)
    t.equal(allowed.front.status, 200, front.log())
    t.match(allowed.front.headers.ratelimit, /^"sub_account.rate";r=\d+;t=\d+$/)
    t.same(
      trusted(allowed.upstreamSaw.front),
      trusted(allowed.upstreamSaw.gateway),
      'the upstream gets the same trusted headers',
    )
    t.equal(trusted(allowed.upstreamSaw.front)['x-service-resolved-tenant'], sub.id)

    const refusals: { case: string; method?: string; path: string; headers: [string, string][]; status: number }[] = [
      { case: 'no key', path: '/v1/things/a', headers: [], status: 401 },
      {
        case: 'unknown key',
        path: '/v1/things/a',
        headers: [['Authorization', `Bearer tgw_${'x'.repeat(40)}`]],
        status: 401,
      },
      {
        case: 'missing scope',
        method: 'DELETE',
        path: '/v1/things/a',
        headers: [['Authorization', `Bearer ${sub.key}`]],
        status: 403,
      },
      {
        case: 'acting forbidden',
        path: '/v1/things/a',
        headers: [
          ['Authorization', `Bearer ${sub.key}`],
          ['X-Service-Acting-Tenant', parent.id],
        ],
        status: 403,
      },
      {
        // Asked with every copy, as the gateway's proxy reads them, before any is removed.
        case: 'acting sent twice',
        path: '/v1/things/a',
        headers: [
          ['Authorization', `Bearer ${sub.key}`],
          ['X-Service-Acting-Tenant', 'self'],
          ['x-service-acting-tenant', 'self'],
        ],
        status: 400,
      },
      { case: 'no route', path: '/v2/other', headers: [['Authorization', `Bearer ${sub.key}`]], status: 404 },
    ]
    for (const refusal of refusals) {
      const answers = await both(front, refusal)
      t.equal(answers.gateway.status, refusal.status, `${refusal.case}: the gateway's own answer`)
      sameAnswer(t, refusal.case, answers.gateway, answers.front)
      t.equal(answers.upstreamSaw.front, undefined, `${refusal.case}: nothing reached the upstream`)
    }
  })

  t.test(`${name}: a write with a body, and one that expects 100 Continue`, async (t) => {
    const sub = await subAccount(`${name}-writer`, 1000, undefined, ['things:read', 'things:write'])
    const body = JSON.stringify({ n: name, pad: 'x'.repeat(2000) })
    for (const expect of [false, true]) {
      const answers = await both(front, {
        method: 'POST',
        path: '/v1/things',
        headers: [
          ['Authorization', `Bearer ${sub.key}`],
          ['Content-Type', 'application/json'],
          ['Content-Length', String(body.length)],
          ...(expect ? ([['Expect', '100-continue']] as [string, string][]) : []),
        ],
        body,
      })
      sameAnswer(t, `POST${expect ? ' with Expect' : ''}`, answers.gateway, answers.front)
      t.equal(answers.front.status, 200, front.log())
      t.equal(answers.upstreamSaw.front?.bodyBytes, body.length, 'the whole body reached the upstream')
      t.same(trusted(answers.upstreamSaw.front), trusted(answers.upstreamSaw.gateway))
    }
  })

  t.test(`${name}: 429 with Retry-After, as through the gateway`, async (t) => {
    const sub = await subAccount(`${name}-tight`, 3)
    const auth: [string, string][] = [['Authorization', `Bearer ${sub.key}`]]
    // Use the rate up through the gateway (its bucket refills one request in 200 s).
    t.ok(await until(10_000, async () => (await callAs(gw.url, sub.key, { path: '/v1/things/a' })).status === 429))
    const answers = await both(front, { path: '/v1/things/a', headers: auth })
    t.equal(answers.gateway.status, 429)
    sameAnswer(t, '429', answers.gateway, answers.front)
    t.ok(Number(answers.front.headers['retry-after']) >= 1, 'Retry-After')
    t.equal(answers.upstreamSaw.front, undefined, 'nothing reached the upstream')
  })

  t.test(`${name}: a client's X-Service-* never reaches the upstream, in any spelling`, async (t) => {
    const sub = await subAccount(`${name}-forger`, 1000)
    const forged: [string, string][] = [
      ['X-Service-Resolved-Tenant', parent.id],
      ['x-service-resolved-tenant', parent.id],
      ['X-SERVICE-KEY-ID', 'forged'],
      ['X_Service_Caller_Tenant', parent.id],
      ['x.service.scopes', 'sub_accounts:write'],
      ['X-Service-Identity', 'forged'],
      ['X-Service-Cell', 'forged'],
      ['X_Service_Identity', 'forged'],
      ['X-Service_Key.Id', 'forged'],
    ]
    const answers = await both(front, {
      path: '/v1/things/a',
      headers: [['Authorization', `Bearer ${sub.key}`], ...forged],
    })
    t.equal(answers.front.status, 200, front.log())
    const seen = trusted(answers.upstreamSaw.front)
    t.same(seen, trusted(answers.upstreamSaw.gateway), 'what the upstream trusts is what the gateway sends')
    t.equal(seen['x-service-resolved-tenant'], sub.id)
    t.notOk(JSON.stringify(seen).includes('forged'), 'no forged value')
  })

  t.test(`${name}: an X-Service-* name the gateway never sets never reaches the upstream`, async (t) => {
    const sub = await subAccount(`${name}-inventor`, 1000)
    const invented: [string, string][] = [
      ['X-Service-Whatever', 'invented'],
      ['x-service-whatever', 'invented-again'],
      ['X-SERVICE-WHATEVER', 'invented'],
      ['X-Service-Whatever', 'invented-thrice'],
      ['x-sErViCe-Tier', 'gold'],
      ['X_Service_Whatever', 'invented'],
      ['x.service.whatever', 'invented'],
      ['X-Service-', 'invented'],
    ]
    const answers = await both(front, {
      path: '/v1/things/a',
      headers: [['Authorization', `Bearer ${sub.key}`], ...invented],
    })
    t.equal(answers.front.status, 200, front.log())
    const seen = trusted(answers.upstreamSaw.front)
    t.same(seen, trusted(answers.upstreamSaw.gateway), 'what the upstream trusts is what the gateway sends')
    t.same(Object.keys(seen).sort(), [
      'x-request-id',
      'x-service-caller-tenant',
      'x-service-key-id',
      'x-service-resolved-tenant',
      'x-service-scopes',
    ])
    t.equal(seen['x-service-resolved-tenant'], sub.id, "the decision's fields still arrive")
    t.equal(seen['x-service-key-id'], sub.keyId)
    const names = Object.keys(answers.upstreamSaw.front?.headers ?? {})
    t.notOk(
      names.some((header) => /whatever|tier/.test(header)),
      `no invented name: ${names.join(' ')}`,
    )
    t.notOk(JSON.stringify(answers.upstreamSaw.front?.headers).includes('invented'), 'no invented value')
  })

  t.test(`${name}: the acting header reaches the decision, never the upstream`, async (t) => {
    const sub = await subAccount(`${name}-acted`, 1000)
    const answers = await both(front, {
      path: '/v1/things/a',
      headers: [
        ['Authorization', `Bearer ${parent.apiKey}`],
        ['x-service-acting-tenant', sub.id],
      ],
    })
    sameAnswer(t, 'acting', answers.gateway, answers.front)
    t.equal(answers.front.status, 200, front.log())
    const seen = trusted(answers.upstreamSaw.front)
    t.same(seen, trusted(answers.upstreamSaw.gateway), 'what the upstream trusts is what the gateway sends')
    t.equal(seen['x-service-resolved-tenant'], sub.id, 'acting as the sub-account')
    t.equal(seen['x-service-caller-tenant'], parent.id)
    t.equal(seen['x-service-acting-tenant'], undefined, 'the acting header was for the gateway alone')
  })

  t.test(`${name}: a keyless CORS preflight is refused, never sent on to the upstream`, async (t) => {
    const received = upstream.received.length
    const preflight = await rawRequest(front.url, {
      method: 'OPTIONS',
      path: '/v1/browser/admin/export?all=1',
      headers: [
        ['Origin', 'https://app.example.com'],
        ['Access-Control-Request-Method', 'GET'],
      ],
    })
    t.equal(preflight.status, 401, `refused as a keyless request is: ${preflight.body.slice(0, 200)}`)
    t.equal(upstream.received.length, received, 'the upstream got nothing')
  })

  t.test(`${name}: a revoked key is refused at once`, async (t) => {
    const sub = await subAccount(`${name}-revoked`, 1000)
    const ask = () => rawRequest(front.url, { path: '/v1/things/a', headers: [['Authorization', `Bearer ${sub.key}`]] })
    t.equal((await ask()).status, 200)
    t.equal((await manage('POST', `/${sub.id}/api-keys/${sub.keyId}/revoke`)).status, 200)
    const refused = await ask()
    t.equal(refused.status, 401, 'the next request')
    t.equal(refused.json().code, 'unauthenticated')
  })

  t.test(`${name}: an allow-list reads the client's address through the proxy`, async (t) => {
    const sub = await subAccount(`${name}-listed`, 1000, { ip_allowlist: ['127.0.0.2/32'] })
    const from = (localAddress: string) =>
      rawRequest(front.url, { path: '/v1/things/a', headers: [['Authorization', `Bearer ${sub.key}`]], localAddress })
    t.equal((await from('127.0.0.2')).status, 200)
    const refused = await from('127.0.0.3')
    t.equal(refused.status, 403)
    t.equal(refused.json().code, 'ip_not_allowed')
    // A client's own X-Forwarded-For is a hop the proxy appends to, never the address taken.
    const forged = await rawRequest(front.url, {
      path: '/v1/things/a',
      headers: [
        ['Authorization', `Bearer ${sub.key}`],
        ['X-Forwarded-For', '127.0.0.2'],
      ],
      localAddress: '127.0.0.3',
    })
    t.equal(forged.status, 403, 'a forged X-Forwarded-For does not pass')
  })
}
