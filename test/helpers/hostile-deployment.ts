// The deployment the hostile-input files attack, and what their properties share: a scoped route
// and a catch-all, each to its own recording upstream; an owner with an active, a second and a
// deactivated sub-account, a stranger with one of its own; small models of docs/api.md; sending
// over a real socket; a fast-check property as one tap assertion; and the check every file ends
// with (nothing refused reached an upstream, no 5xx, the gateway alive).
//
// Importing this module starts the deployment on the importing file's root test (a tap file is a
// process of its own), so every hostile-input-*.test.ts has its own gateway, database, Redis key
// prefix and upstreams on ports of its own, and they can run side by side.
//
// The seed is fixed (reproducible CI); HOSTILE_SEED=<n> replays a failure and HOSTILE_SEED=random
// explores; HOSTILE_RUNS_SCALE multiplies the run counts.
import { BASE62, withChecksum } from '../../src/auth/key-format.js'
import t, { type Test } from 'tap'
import fc from 'fast-check'
import { startGateway } from '../helpers/gateway.js'
import type { JsonBody } from '../helpers/json.js'
import { sleep } from '../helpers/poll.js'
import {
  expectNo,
  isParserRefusal,
  nextMarker,
  problemIssue,
  propertySeed,
  rawExchange,
  recordingUpstream,
  requestBytes,
  UPSTREAM_MARK,
  type HeaderLines,
  type RawHttpResponse,
} from '../helpers/hostile.js'

// ---------------------------------------------------------------------------------------------
// The deployment under attack: a scoped route and a catch-all, each to its own recording upstream.

export const catchAll = await recordingUpstream(t, 'catch-all')
export const shipments = await recordingUpstream(t, 'shipments')
export const gw = await startGateway(t, {
  upstreamUrl: catchAll.url,
  gatewayConfig: {
    routes: [
      {
        prefix: '/v1/shipments',
        upstream: shipments.url,
        scopes: { read: ['tracking:read'], write: ['tracking:write'] },
      },
    ],
  },
})
export const port = Number(new URL(gw.url).port)
export const sql = gw.database.sql
export const app = gw.app

/** Every request the gateway refused, by marker: none may ever show up at an upstream. */
export const refusedMarkers = new Set<string>()
export const upstreamsGot = (marker: string) => catchAll.byMarker(marker).length + shipments.byMarker(marker).length
export const totalReceived = () => catchAll.received.length + shipments.received.length

export async function manage(
  key: string,
  method: 'POST' | 'PATCH' | 'GET',
  url: string,
  body?: unknown,
): Promise<JsonBody> {
  const res = await app.inject({
    method,
    url,
    headers: {
      authorization: `Bearer ${key}`,
      'x-service-acting-tenant': 'self',
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
  })
  if (res.statusCode >= 300) throw new Error(`setup ${method} ${url}: ${res.statusCode} ${res.body}`)
  return res.json()
}

// The owner has an active sub-account (acme-eu), another (acme-us) and a deactivated one (gone);
// a stranger has one of its own. The owner's key holds the management scopes only (no tracking:*),
// so the /v1/shipments route must refuse it whatever the path looks like.
export const owner = await gw.createParent()
export const stranger = await gw.createParent()
export const active = await manage(owner.apiKey, 'POST', '/v1/sub-accounts', {
  name: 'Acme EU',
  external_id: 'acme-eu',
})
export const sibling = await manage(owner.apiKey, 'POST', '/v1/sub-accounts', {
  name: 'Acme US',
  external_id: 'acme-us',
})
export const gone = await manage(owner.apiKey, 'POST', '/v1/sub-accounts', { name: 'Gone', external_id: 'gone' })
await manage(owner.apiKey, 'POST', `/v1/sub-accounts/${gone.id}/deactivate`)
export const foreign = await manage(stranger.apiKey, 'POST', '/v1/sub-accounts', {
  name: 'Foreign',
  external_id: 'foreign-only',
})
export const subKey = await manage(owner.apiKey, 'POST', `/v1/sub-accounts/${active.id}/api-keys`, {
  name: 'k',
  scopes: ['tracking:read'],
})
export const revokedKey = await manage(owner.apiKey, 'POST', `/v1/sub-accounts/${active.id}/api-keys`, {
  name: 'r',
  scopes: ['tracking:read'],
})
await manage(owner.apiKey, 'POST', `/v1/sub-accounts/${active.id}/api-keys/${revokedKey.id}/revoke`)

export interface Tenant {
  id: string
  externalId: string | null
  status: 'active' | 'deactivated'
}
export const ownSubs: Tenant[] = [
  { id: active.id, externalId: 'acme-eu', status: 'active' },
  { id: sibling.id, externalId: 'acme-us', status: 'active' },
  { id: gone.id, externalId: 'gone', status: 'deactivated' },
]

// ---------------------------------------------------------------------------------------------
// Small models of the contract, written from docs/api.md, not from src/.

/** Node's parser drops leading and trailing spaces and tabs of a header value (RFC 9110 OWS). */
export const ows = (value: string) => value.replace(/^[ \t]+|[ \t]+$/g, '')
export const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/
export const EXTERNAL_ID = /^[A-Za-z0-9._:@/+-]{1,128}$/
export const SCOPE = /^[a-z][a-z0-9_.-]*(:[a-z0-9_.*-]+)*$/
/** Characters Node's strict parser refuses in a header value (all controls but HTAB). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the characters a header value may not hold
export const HEADER_CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f]/

export type Outcome =
  | { pass: { resolved: string; caller: string } }
  | { refuse: { status: number; code: string } }
  | { parser: true }

/** docs/api.md for a parent key (`owner`) or the active sub-account's key, on the catch-all. */
export function actingOutcome(keyOf: 'owner' | 'sub', method: string, lines: string[]): Outcome {
  if (lines.some((line) => HEADER_CONTROL.test(line))) return { parser: true }
  const own: Tenant = keyOf === 'owner' ? { id: owner.id, externalId: null, status: 'active' } : ownSubs[0]!
  const pass = (tenant: string) => ({ pass: { resolved: tenant, caller: own.id } })
  const refuse = (status: number, code: string) => ({ refuse: { status, code } })
  const write = ['POST', 'PUT', 'PATCH', 'DELETE'].includes(method)
  if (lines.length === 0) {
    // The owner has active sub-accounts: its writes must name a tenant.
    return keyOf === 'owner' && write ? refuse(400, 'acting_tenant_required') : pass(own.id)
  }
  const malformed = refuse(400, 'acting_tenant_malformed')
  if (lines.length > 1) return malformed
  const value = ows(lines[0]!)
  if (value === '' || value.includes(',')) return malformed
  let target: { id: string } | { ext: string }
  if (value === 'self') return pass(own.id)
  if (UUID.test(value)) target = { id: value.toLowerCase() }
  else if (value.startsWith('ext:') && EXTERNAL_ID.test(value.slice(4))) target = { ext: value.slice(4) }
  else return malformed
  const forbidden = refuse(403, 'acting_tenant_forbidden')
  // A sub-account key may name itself by its UUID or ext:; a parent's own UUID is no sub-account of it.
  if (keyOf === 'sub') {
    const itself = 'id' in target ? target.id === own.id : target.ext === own.externalId
    return itself ? pass(own.id) : forbidden
  }
  const sub = ownSubs.find((s) => ('id' in target ? s.id === target.id : s.externalId === target.ext))
  if (sub === undefined) return forbidden
  return sub.status === 'active' ? pass(sub.id) : refuse(403, 'acting_tenant_deactivated')
}

/** docs/api.md's list: the paths refused with 400 bad_path (case-insensitive), as sent or decoded once or twice. */
export function isBadPathByContract(path: string): boolean {
  let view = path
  for (let round = 0; round < 3; round++) {
    if (isBadAsWritten(view)) return true
    if (!view.includes('%')) return false
    try {
      view = decodeURIComponent(view)
    } catch {
      return false
    }
  }
  return false
}

export function isBadAsWritten(path: string): boolean {
  const p = path.toLowerCase()
  if (['..', '%2e%2e', '.%2e', '%2e.', '%2f', '%5c', '\\', '//', ';', '%3b', '%23'].some((bad) => p.includes(bad)))
    return true
  // A control character once percent-decoded (%00–%1f, %7f), or raw.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the model names control characters
  if (/%[01][0-9a-f]|%7f|[\u0000-\u001f\u007f]/.test(p)) return true
  return p
    .split('/')
    .slice(1)
    .some((segment) => segment === '.' || segment === '%2e')
}

export const RESERVED = ['/v1/sub-accounts', '/healthz', '/readyz', '/openapi.json', '/docs']

/**
 * The path an upstream would act on: without query and fragment, dot segments resolved (WHATWG
 * URL, which also takes %2e for a dot), then percent-decoded where that is valid.
 */
export function upstreamView(target: string): string {
  let path: string
  try {
    path = new URL(target.startsWith('/') ? target : `/${target}`, 'http://upstream.invalid').pathname
  } catch {
    path = target.split(/[?#]/)[0]!
  }
  try {
    return decodeURIComponent(path)
  } catch {
    return path
  }
}

export function decodes(path: string): boolean {
  try {
    decodeURIComponent(path)
    return true
  } catch {
    return false
  }
}

export const under = (path: string, prefix: string) => path === prefix || path.startsWith(`${prefix}/`)
/**
 * A decoded path as a folding upstream reads it: lower case, trailing dots, Unicode spaces and
 * default-ignorable code points of each segment dropped.
 */
export const folded = (view: string) =>
  view
    .split('/')
    .map((segment) => segment.toLowerCase().replace(/[.\p{White_Space}\p{Default_Ignorable_Code_Point}]+$/u, ''))
    .join('/')
export const isReservedView = (view: string) => RESERVED.some((reserved) => under(folded(view), reserved))
/** What a folding /v1/shipments upstream would serve as its own (docs/api.md: such a path is never proxied elsewhere). */
export const isShipmentsView = (view: string) => under(folded(view), '/v1/shipments')

// ---------------------------------------------------------------------------------------------
// Sending over a real socket, and the checks every proxied case shares.

export function send(method: string, target: string, headers: HeaderLines, body?: string) {
  const marker = nextMarker('hx')
  const lines: HeaderLines = [
    ['Host', `127.0.0.1:${port}`],
    ['X-Request-Id', marker],
    ...headers,
    ['Connection', 'close'],
  ]
  if (body !== undefined) lines.push(['Content-Length', String(Buffer.byteLength(body, 'latin1'))])
  else if (!['GET', 'HEAD', 'OPTIONS'].includes(method)) lines.push(['Content-Length', '0'])
  const bytes = requestBytes({ method, target, headers: lines, ...(body === undefined ? {} : { body }) })
  return { marker, sent: rawExchange(port, bytes, { until: 1, head: method === 'HEAD' }) }
}

export async function single(
  marker: string,
  sent: ReturnType<typeof send>['sent'],
  head = false,
): Promise<RawHttpResponse> {
  const exchange = await sent
  if (exchange.responses.length !== 1) {
    throw new Error(
      `expected one response on the connection, got ${exchange.responses.length} (leftover ${exchange.leftover} bytes)`,
    )
  }
  const res = exchange.responses[0]!
  noteRaw(res, head)
  if (res.status >= 500) throw new Error(`5xx: ${res.status} ${res.body.slice(0, 300)}`)
  if (res.status >= 300) refusedMarkers.add(marker)
  return res
}

/** What every refused request must satisfy: problem+json (unless Node's parser refused it), nothing upstream. */
export function refusedIssue(
  res: RawHttpResponse,
  marker: string,
  method: string,
  expected?: { status: number; code: string },
): string | null {
  if (upstreamsGot(marker) > 0) return `refused with ${res.status} yet an upstream received it`
  if (isParserRefusal(res))
    return expected === undefined
      ? null
      : `Node's parser refused it (${res.status}); expected ${expected.status} ${expected.code}`
  if (method === 'HEAD') {
    if (expected !== undefined && res.status !== expected.status)
      return `HEAD answered ${res.status}, expected ${expected.status}`
    return (res.header('content-type') ?? '').startsWith('application/problem+json')
      ? null
      : `HEAD refusal is not problem+json: ${res.header('content-type')}`
  }
  return problemIssue(res, { requestId: marker, ...(expected ?? {}) })
}

export function checkOutcome(res: RawHttpResponse, marker: string, method: string, outcome: Outcome): void {
  if ('parser' in outcome) {
    if (!isParserRefusal(res))
      throw new Error(`expected Node's parser to refuse it, got ${res.status} ${res.body.slice(0, 200)}`)
    expectNo(upstreamsGot(marker) > 0 ? 'reached an upstream' : null, 'parser refusal')
    return
  }
  if ('refuse' in outcome) {
    expectNo(refusedIssue(res, marker, method, outcome.refuse), 'refusal')
    return
  }
  if (res.status !== 200 || res.header(UPSTREAM_MARK) !== 'catch-all') {
    throw new Error(
      `expected the catch-all upstream to answer 200 as ${outcome.pass.resolved}, got ${res.status} ${res.body.slice(0, 200)}`,
    )
  }
  const got = catchAll.byMarker(marker)
  if (got.length !== 1 || shipments.byMarker(marker).length !== 0)
    throw new Error(`the catch-all received it ${got.length} times`)
  const headers = got[0]!.headers
  if (headers['x-service-resolved-tenant'] !== outcome.pass.resolved) {
    throw new Error(
      `resolved tenant ${String(headers['x-service-resolved-tenant'])}, expected ${outcome.pass.resolved}`,
    )
  }
  if (headers['x-service-caller-tenant'] !== outcome.pass.caller)
    throw new Error(`caller tenant ${String(headers['x-service-caller-tenant'])}`)
  if (headers['x-service-acting-tenant'] !== undefined) throw new Error('the acting header itself was forwarded')
}

export const SHRINK_BUDGET_MS = 10_000

/** How the cases of the running property were answered ("200 upstream", "400 bad_path", …). */
let tally: Map<string, number> | null = null
export function note(label: string): void {
  tally?.set(label, (tally.get(label) ?? 0) + 1)
}
export function noteRaw(res: RawHttpResponse, head = false): void {
  if (isParserRefusal(res)) note(`${res.status} (Node's parser)`)
  else if (res.header(UPSTREAM_MARK) !== undefined) note(`${res.status} from the ${res.header(UPSTREAM_MARK)} upstream`)
  else if (head || !(res.header('content-type') ?? '').includes('json')) note(`${res.status}`)
  else {
    let code = ''
    try {
      code = String(res.json().code ?? '')
    } catch {
      code = '(not JSON)'
    }
    note(`${res.status} ${code}`.trim())
  }
}

/**
 * Runs a fast-check property as one tap assertion. `examples` run first, whatever the seed: the
 * reproductions of bugs found so far. The comment after it tells how the cases were answered.
 */
export async function property<Ts extends [unknown, ...unknown[]]>(
  t: Test,
  name: string,
  seed: number,
  numRuns: number,
  arbitraries: { [K in keyof Ts]: fc.Arbitrary<Ts[K]> },
  predicate: (...args: Ts) => Promise<void>,
  examples: Ts[] = [],
): Promise<void> {
  const started = Date.now()
  let cases = 0
  // Shrinking runs the property again and again on smaller values; over the network that can take
  // minutes. After SHRINK_BUDGET_MS every further candidate counts as passing, which ends the
  // shrinking with the smallest counterexample found so far (replay it with its seed and path).
  let failedAt: number | null = null
  tally = new Map()
  try {
    await fc.assert(
      fc.asyncProperty(...arbitraries, async (...args: Ts) => {
        if (failedAt !== null && Date.now() - failedAt > SHRINK_BUDGET_MS) return
        cases += 1
        try {
          await predicate(...args)
        } catch (err) {
          failedAt ??= Date.now()
          throw err
        }
      }),
      { seed, numRuns, examples },
    )
    t.pass(`${name}: ${numRuns} generated cases hold (${cases} run, ${Date.now() - started} ms)`)
  } catch (err) {
    // fast-check's message has the seed, the shrunk counterexample and how to replay it; the
    // property's own error (its cause) says what was wrong with that counterexample.
    const cause = (err as { cause?: unknown }).cause
    const why = cause instanceof Error ? cause.message : String(cause ?? '')
    t.fail(`${name}: ${why.slice(0, 2000)}\n${(err as Error).message.slice(0, 3000)}`)
  }
  t.comment(
    `${name} answers: ${[...tally]
      .sort((a, b) => b[1] - a[1])
      .map(([label, n]) => `${n}× ${label}`)
      .join(', ')}`,
  )
  tally = null
}

// ---------------------------------------------------------------------------------------------
// Generators shared by the header properties.

export const chr = (code: number) => String.fromCharCode(code)
/** One character Node accepts in a header value: VCHAR, space, tab, obs-text. */
export const headerChar = fc.oneof(
  { weight: 10, arbitrary: fc.integer({ min: 0x21, max: 0x7e }).map(chr) },
  { weight: 2, arbitrary: fc.constantFrom(' ', '\t') },
  { weight: 1, arbitrary: fc.integer({ min: 0x80, max: 0xff }).map(chr) },
)
export const controlChar = fc.constantFrom(...[0, 1, 7, 8, 11, 12, 14, 27, 31, 127].map(chr))
export const headerText = (maxLength: number) => fc.array(headerChar, { maxLength }).map((cs) => cs.join(''))
export const trickyChar = fc.constantFrom(
  ',',
  ' ',
  '\t',
  '"',
  ';',
  ':',
  '%',
  '/',
  '.',
  '-',
  '0',
  'a',
  'A',
  'F',
  '\u00a0',
  '\u00e9',
  '{',
  '}',
  '=',
  '\\',
)

/** A value mutated a little: a case flip, a character inserted or removed, padding, a second value. */
export function mutated(base: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc.tuple(base, fc.nat(), trickyChar, fc.integer({ min: 0, max: 5 })).map(([value, at, c, how]) => {
    const i = value.length === 0 ? 0 : at % value.length
    switch (how) {
      case 0: {
        const ch = value[i] ?? ''
        const flipped = ch === ch.toUpperCase() ? ch.toLowerCase() : ch.toUpperCase()
        return value.slice(0, i) + flipped + value.slice(i + 1)
      }
      case 1:
        return value.slice(0, i) + c + value.slice(i)
      case 2:
        return value.slice(0, i) + value.slice(i + 1)
      case 3:
        return ` \t${value}  `
      case 4:
        return `${value},${value}`
      default:
        return `"${value}"`
    }
  })
}

/** `tgw_` + 43 base62 characters + the 6-character base62 CRC32 of what precedes it (README). */
export const base62Body = fc
  .array(fc.constantFrom(...BASE62), { minLength: 43, maxLength: 43 })
  .map((cs) => cs.join(''))
export const wellFormedUnknownKey = base62Body.map((body) => withChecksum(`tgw_${body}`))

export const seedFor = (t: Test, offset: number) => propertySeed(t, 20261121 + offset)

/** The status /healthz answers on a fresh connection: whether the gateway is still alive. */
export async function healthzStatus(): Promise<number | undefined> {
  const exchange = await rawExchange(
    port,
    requestBytes({
      method: 'GET',
      target: '/healthz',
      headers: [
        ['Host', 'x'],
        ['Connection', 'close'],
      ],
    }),
    { until: 1 },
  )
  return exchange.responses[0]?.status
}

/** The last test of every hostile-input file: what its properties must have left behind. */
export function checkAfterwards(): void {
  t.test(
    'afterwards: nothing refused reached an upstream, no 5xx was ever answered, the gateway is alive',
    async (t) => {
      await sleep(200)
      const leaked = [...catchAll.received, ...shipments.received].filter(
        (r) => r.marker !== undefined && refusedMarkers.has(r.marker),
      )
      t.same(
        leaked.map((r) => `${r.method} ${r.url}`),
        [],
        `none of the ${refusedMarkers.size} refused requests reached an upstream (they received ${totalReceived()} in all)`,
      )
      const requests = await app.metrics.registry.getSingleMetric('tgw_http_requests_total')!.get()
      const fiveXX = requests.values.filter((v) => v.labels.status_class === '5xx').reduce((sum, v) => sum + v.value, 0)
      const all = requests.values.reduce((sum, v) => sum + v.value, 0)
      t.equal(fiveXX, 0, `no 5xx among the ${all} requests the gateway answered`)
      t.equal(await healthzStatus(), 200, '/healthz still answers')
    },
  )
}
