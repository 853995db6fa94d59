// Soak: two gateways on one database and one Redis under mixed traffic while keys are revoked and
// sub-accounts deactivated and reactivated, one change at a time. It measures how long each change
// takes to reach both (the target: a revoked key refused everywhere within 1 s p99, see
// docs/operations.md), whether any answer was wrong once a change had settled (a leak, a false
// refusal, the wrong tenant, a stale management read, a 5xx), and RSS and heap over time.
// bench/README.md: how it judges an answer, the knobs.
import { randomBytes, randomUUID } from 'node:crypto'
import http from 'node:http'
import { performance } from 'node:perf_hooks'
import {
  type Answer,
  type Call,
  counts,
  createDatabase,
  deleteRedisPrefix,
  envInt,
  fmt,
  type Gateway,
  isInterrupted,
  metric,
  ms,
  percentile,
  reportHead,
  request,
  rssBytes,
  run,
  runCli,
  type Scrape,
  scrape,
  type Server,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
  whenInterrupted,
  REDIS_URL,
} from './lib.js'
import { keyFor } from './seed.js'

const DURATION = envInt('SOAK_DURATION', 600)
const CONNECTIONS = envInt('SOAK_CONNECTIONS', 16)
/** Requests per second over both instances; 0: as fast as the connections go. */
const RATE = envInt('SOAK_RATE', 400, 0)
const SUBS = envInt('SOAK_SUBS', 50)
const KEYS = envInt('SOAK_KEYS', 4)
const MAX_DEACTIVATED = Math.max(1, Math.floor(SUBS / 10))
/** How long a change is watched on both instances after its call answered, and how often. */
const WATCH_MS = 1200
const PROBE_MS = 5
/** A change not seen within this is "not seen". */
const EFFECT_TIMEOUT_MS = 10_000
const REACTIVATE_AFTER_MS = 6000
const SAMPLE_MS = 10_000

// ---------------------------------------------------------------------------------------------
// Answers. The upstream (bench/servers.js) answers every path but the throughput benches' with the
// headers it received, so an answer says whom the gateway said the request was for.

/** `ok` when the upstream saw the expected tenants, `wrong tenant` when it saw others, else the status and problem code. */
function outcome(answer: Answer, tenant: string, caller: string): string {
  let parsed: Record<string, unknown> = {}
  try {
    parsed = JSON.parse(answer.body) as Record<string, unknown>
  } catch {}
  if (answer.status !== 200) return `${answer.status} ${typeof parsed.code === 'string' ? parsed.code : '-'}`
  return parsed['x-service-resolved-tenant'] === tenant && parsed['x-service-caller-tenant'] === caller
    ? 'ok'
    : 'wrong tenant'
}

const UNAUTHENTICATED = '401 unauthenticated'
const TARGET_DEACTIVATED = '403 acting_tenant_deactivated'
const OWN_DEACTIVATED = '403 tenant_deactivated'

// ---------------------------------------------------------------------------------------------
// What each key and sub-account is. A change makes its entity pending from just before its call
// until both instances answer the new way; a request whose entities all stayed settled from its
// sending to its answer has one right answer, one that overlapped a change may get either.

type Status = 'active' | 'revoked' | 'deactivated'
interface Entity {
  status: Status
  pending: boolean
  /** Bumped when a change begins and when it settles. */
  gen: number
  settledAt: number
}
const entities = new Map<string, Entity>()
const entity = (id: string) => {
  const e = entities.get(id) ?? { status: 'active', pending: false, gen: 0, settledAt: 0 }
  entities.set(id, e)
  return e
}

interface Key {
  id: string
  apiKey: string
  subId: string
}
interface Expectation {
  snapshot: { id: string; e: Entity; gen: number }[]
  /** The right answers if no entity changes meanwhile. */
  settled: string[]
  /** The answers acceptable when a change overlapped the request. */
  any: string[]
}
const snap = (...ids: string[]) => ids.map((id) => ({ id, e: entity(id), gen: entity(id).gen }))
/** Parent acting as a sub-account. */
function expectTarget(subId: string): Expectation {
  const snapshot = snap(`sub:${subId}`)
  const { e } = snapshot[0]!
  const any = ['ok', TARGET_DEACTIVATED]
  return { snapshot, settled: e.pending ? any : [e.status === 'active' ? 'ok' : TARGET_DEACTIVATED], any }
}
/** A sub-account's own key. */
function expectOwnKey(key: Key): Expectation {
  const snapshot = snap(`key:${key.id}`, `sub:${key.subId}`)
  const [k, s] = [snapshot[0]!.e, snapshot[1]!.e]
  const bySub = s.pending ? ['ok', OWN_DEACTIVATED] : [s.status === 'active' ? 'ok' : OWN_DEACTIVATED]
  const settled = k.pending ? [UNAUTHENTICATED, ...bySub] : k.status === 'revoked' ? [UNAUTHENTICATED] : bySub
  return { snapshot, settled, any: ['ok', UNAUTHENTICATED, OWN_DEACTIVATED] }
}
const fixed = (answer: string): Expectation => ({ snapshot: [], settled: [answer], any: [answer] })

// ---------------------------------------------------------------------------------------------
// The load: request kinds and their shares, each judged against what its entities were.

const KINDS = [
  ['proxy, parent acting as ext:', 20],
  ['proxy, parent acting as uuid', 20],
  ['proxy, parent as self', 5],
  ['proxy, sub-account key', 30],
  ['mgmt get sub-account', 3],
  ['mgmt lists and usage', 3],
  ['bad: unknown key', 2],
  ['bad: malformed key', 1],
  ['bad: malformed acting header', 2],
  ['bad: acting as a stranger', 1],
  ['bad: write without acting header', 1],
] as const
type Kind = (typeof KINDS)[number][0]

interface Tally {
  count: number
  expected: number
  duringChange: number
  errors: Record<string, number>
  latencies: number[]
}
const tallies = new Map<Kind, Tally>(
  KINDS.map(([kind]) => [kind, { count: 0, expected: 0, duringChange: 0, errors: {}, latencies: [] }]),
)
const errorSamples: string[] = []
let soakStart = 0

function recordError(kind: Kind, instance: string, type: string, detail: string): void {
  const t = tallies.get(kind)!
  t.errors[type] = (t.errors[type] ?? 0) + 1
  if (errorSamples.length < 15)
    errorSamples.push(
      `t=${((performance.now() - soakStart) / 1000).toFixed(1)}s ${instance} ${kind}: ${type}: ${detail}`,
    )
}

function judge(kind: Kind, instance: string, answer: string, status: number, x: Expectation): void {
  const t = tallies.get(kind)!
  const changed = x.snapshot.some((s) => s.e.gen !== s.gen)
  const allowed = changed ? x.any : x.settled
  if (allowed.includes(answer)) {
    if (allowed.length > 1) t.duringChange++
    else t.expected++
    return
  }
  const now = performance.now()
  const states = x.snapshot.map(
    (s) =>
      `${s.id.slice(0, 12)} ${s.e.status}${s.e.pending ? ' (changing)' : ` settled ${(now - s.e.settledAt).toFixed(0)} ms ago`}`,
  )
  let type = 'unexpected status'
  if (status >= 500) type = '5xx'
  else if (answer === 'wrong tenant') type = 'wrong tenant'
  else if (answer === 'ok') type = 'leak'
  else if (allowed.length === 1 && allowed[0] === 'ok') type = 'false refusal'
  recordError(kind, instance, type, `answered ${answer}, expected ${allowed.join(' | ')} [${states.join(', ')}]`)
}

interface World {
  parent: { id: string; apiKey: string }
  subs: { id: string; externalId: string | null }[]
  liveKeys: Key[]
  revokedKeys: Key[]
}

/** One request of `kind`: what to send, and how to judge the answer. */
function build(kind: Kind, w: World): { call: Call; judge: (instance: string, a: Answer) => void } {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(Math.random() * list.length)]!
  const auth = { authorization: `Bearer ${w.parent.apiKey}` }
  const post = Math.random() < 0.3
  const proxied = (headers: Record<string, string>): Call =>
    post
      ? { method: 'POST', path: '/v1/things', headers, body: JSON.stringify({ n: Math.random() }) }
      : { method: 'GET', path: `/v1/things/${Math.floor(Math.random() * 1000) + 2}`, headers }
  const expect = (call: Call, x: Expectation, tenant = '', caller = '') => ({
    call,
    judge: (i: string, a: Answer) => judge(kind, i, outcome(a, tenant, caller), a.status, x),
  })
  switch (kind) {
    case 'proxy, parent acting as ext:':
    case 'proxy, parent acting as uuid': {
      const withExt = w.subs.filter((s) => s.externalId !== null)
      const sub = pick(kind.endsWith('ext:') ? withExt : w.subs)
      const header = kind.endsWith('ext:') ? `ext:${sub.externalId}` : sub.id
      return expect(proxied({ ...auth, 'x-service-acting-tenant': header }), expectTarget(sub.id), sub.id, w.parent.id)
    }
    case 'proxy, parent as self':
      return expect(proxied({ ...auth, 'x-service-acting-tenant': 'self' }), fixed('ok'), w.parent.id, w.parent.id)
    case 'proxy, sub-account key': {
      // Mostly live keys; one in twenty a recently revoked one.
      const key = w.revokedKeys.length > 0 && Math.random() < 0.05 ? pick(w.revokedKeys) : pick(w.liveKeys)
      return expect(proxied({ authorization: `Bearer ${key.apiKey}` }), expectOwnKey(key), key.subId, key.subId)
    }
    case 'mgmt get sub-account': {
      // Management reads come from Postgres: once a change has settled they must show it.
      const sub = pick(w.subs)
      const [s] = snap(`sub:${sub.id}`)
      return {
        call: { method: 'GET', path: `/v1/sub-accounts/${sub.id}`, headers: auth },
        judge: (i, a) => {
          const shown = a.status === 200 ? (JSON.parse(a.body) as { status: string }).status : `${a.status}`
          const any = ['active', 'deactivated']
          judge(kind, i, shown, a.status, { snapshot: [s!], settled: s!.e.pending ? any : [s!.e.status], any })
        },
      }
    }
    case 'mgmt lists and usage': {
      const path = pick([
        '/v1/sub-accounts?limit=20',
        `/v1/sub-accounts/${pick(w.subs).id}/api-keys?limit=10`,
        '/v1/sub-accounts/usage',
      ])
      return {
        call: { method: 'GET', path, headers: auth },
        judge: (i, a) => judge(kind, i, String(a.status), a.status, fixed('200')),
      }
    }
    case 'bad: unknown key':
      // Well-formed, right checksum, never minted: it reaches the store (a fresh one each time).
      return expect(proxied({ authorization: `Bearer ${keyFor(randomUUID(), 0)}` }), fixed(UNAUTHENTICATED))
    case 'bad: malformed key':
      return expect(proxied({ authorization: 'Bearer tgw_not-a-key' }), fixed(UNAUTHENTICATED))
    case 'bad: malformed acting header': {
      const header = pick(['ext:', 'SELF', 'nobody', `${pick(w.subs).id},self`, 'ext:has space'])
      return expect(proxied({ ...auth, 'x-service-acting-tenant': header }), fixed('400 acting_tenant_malformed'))
    }
    case 'bad: acting as a stranger':
      return expect(
        proxied({ ...auth, 'x-service-acting-tenant': pick([randomUUID(), 'ext:nobody-here']) }),
        fixed('403 acting_tenant_forbidden'),
      )
    case 'bad: write without acting header':
      // The parent always has active sub-accounts (at most a tenth are ever deactivated).
      return expect(
        { method: 'POST', path: '/v1/things', headers: auth, body: '{}' },
        fixed('400 acting_tenant_required'),
      )
  }
}

/** Workers over CONNECTIONS, requests alternating between the instances, RATE per second in all. */
async function runLoad(
  w: World,
  instances: { name: string; url: URL; agent: http.Agent }[],
  stopped: () => boolean,
): Promise<void> {
  const totalWeight = KINDS.reduce((sum, [, weight]) => sum + weight, 0)
  const pickKind = (): Kind => {
    let r = Math.random() * totalWeight
    for (const [kind, weight] of KINDS) {
      r -= weight
      if (r < 0) return kind
    }
    return KINDS[0][0]
  }
  let turn = 0
  let nextSlot = performance.now()
  const worker = async () => {
    while (!stopped()) {
      if (RATE > 0) {
        const now = performance.now()
        const at = Math.max(now, nextSlot)
        nextSlot = at + 1000 / RATE
        if (at - now >= 1) await sleep(at - now)
      }
      const target = instances[turn++ % instances.length]!
      const kind = pickKind()
      const { call, judge: judgeAnswer } = build(kind, w)
      const t = tallies.get(kind)!
      t.count++
      try {
        const answer = await request(target.agent, target.url, call, 5000)
        t.latencies.push(answer.ms)
        judgeAnswer(target.name, answer)
      } catch (err) {
        recordError(
          kind,
          target.name,
          (err as Error).message === 'timeout' ? 'timeout' : 'connection error',
          (err as Error).message,
        )
      }
    }
  }
  await Promise.all(Array.from({ length: CONNECTIONS }, worker))
}

// ---------------------------------------------------------------------------------------------
// The changes, and how long each took to reach each instance.

type ChangeKind = 'revoke' | 'deactivate' | 'reactivate'
interface Probe {
  name: string
  call: Call
  tenant: string
  caller: string
  old: string
  want: string
}
interface Seen {
  /** ms from the change call's answer to the answer of the first probe that saw it; null: never. */
  effectMs: number | null
  /** ms to the sending of the last probe that still got the old answer (null: none did). */
  oldUntilMs: number | null
  /** The old answer again after the new one. */
  flaps: number
  /** Neither the old nor the new answer. */
  others: number
}
interface Change {
  kind: ChangeKind
  what: string
  callMs: number
  seen: Record<'A' | 'B', Record<string, Seen>>
  error?: string
}

interface Instance extends Gateway {
  name: 'A' | 'B'
  agent: http.Agent
  base: URL
  /** Its log lines at warn or above. */
  warnings: number
}

/** Probes one instance until every probe answers the new way, and on until WATCH_MS. */
async function watch(g: Instance, probes: Probe[], t0: number, onSeen: () => void): Promise<Record<string, Seen>> {
  const seen = Object.fromEntries(
    probes.map((p) => [p.name, { effectMs: null, oldUntilMs: null, flaps: 0, others: 0 } as Seen]),
  )
  let all = false
  for (;;) {
    await Promise.all(
      probes.map(async (p) => {
        const r = seen[p.name]!
        const sentAt = performance.now()
        const answer = await request(g.agent, g.base, p.call, 5000).then(
          (a) => outcome(a, p.tenant, p.caller),
          (err: Error) => err.message,
        )
        if (answer === p.want) r.effectMs ??= performance.now() - t0
        else if (answer !== p.old) r.others++
        else if (r.effectMs !== null) r.flaps++
        else r.oldUntilMs = sentAt - t0
      }),
    )
    const elapsed = performance.now() - t0
    if (!all && probes.every((p) => seen[p.name]!.effectMs !== null)) {
      all = true
      onSeen()
    }
    if ((all && elapsed >= WATCH_MS) || (!all && (elapsed >= EFFECT_TIMEOUT_MS || isInterrupted()))) return seen
    await sleep(all ? 20 : PROBE_MS)
  }
}

async function changeLoop(
  w: World,
  A: Instance,
  B: Instance,
  deadline: number,
  mint: (subId: string) => Promise<Key>,
): Promise<Change[]> {
  const changes: Change[] = []
  const deactivatedAt = new Map<string, number>()
  const asParent = { authorization: `Bearer ${w.parent.apiKey}`, 'x-service-acting-tenant': 'self' }
  const probePath = '/v1/things/probe'
  const keyProbe = (key: Key, old: string, want: string): Probe => ({
    name: 'own key',
    call: { method: 'GET', path: probePath, headers: { authorization: `Bearer ${key.apiKey}` } },
    tenant: key.subId,
    caller: key.subId,
    old,
    want,
  })
  const targetProbe = (subId: string, old: string, want: string): Probe => ({
    name: 'acting as uuid',
    call: {
      method: 'GET',
      path: probePath,
      headers: { authorization: `Bearer ${w.parent.apiKey}`, 'x-service-acting-tenant': subId },
    },
    tenant: subId,
    caller: w.parent.id,
    old,
    want,
  })
  let nextIsRevoke = true
  let wake = () => {}
  whenInterrupted(() => wake())
  while (!isInterrupted() && performance.now() < deadline) {
    const oldest = [...deactivatedAt].sort((a, b) => a[1] - b[1])[0]
    let kind: ChangeKind = nextIsRevoke || deactivatedAt.size >= MAX_DEACTIVATED ? 'revoke' : 'deactivate'
    if (oldest !== undefined && performance.now() - oldest[1] >= REACTIVATE_AFTER_MS) kind = 'reactivate'
    else nextIsRevoke = !nextIsRevoke
    // Revocations through A, deactivations through B, reactivations through A.
    const via = kind === 'deactivate' ? B : A
    let subId: string
    let key: Key | undefined
    let probes: Probe[]
    let changed: { id: string; status: Status }
    if (kind === 'revoke') {
      const candidates = w.liveKeys.filter((k) => !deactivatedAt.has(k.subId) && !entity(`sub:${k.subId}`).pending)
      key = candidates[Math.floor(Math.random() * candidates.length)]!
      subId = key.subId
      probes = [{ ...keyProbe(key, 'ok', UNAUTHENTICATED), name: 'key' }]
      changed = { id: `key:${key.id}`, status: 'revoked' }
    } else {
      const candidates = w.subs.filter((s) => !deactivatedAt.has(s.id) && !entity(`sub:${s.id}`).pending)
      subId = kind === 'reactivate' ? oldest![0] : candidates[Math.floor(Math.random() * candidates.length)]!.id
      const [before, after] = kind === 'deactivate' ? ['ok', TARGET_DEACTIVATED] : [TARGET_DEACTIVATED, 'ok']
      const own = w.liveKeys.find((k) => k.subId === subId)
      probes = [
        targetProbe(subId, before, after),
        ...(own === undefined
          ? []
          : [keyProbe(own, before === 'ok' ? 'ok' : OWN_DEACTIVATED, after === 'ok' ? 'ok' : OWN_DEACTIVATED)]),
      ]
      changed = { id: `sub:${subId}`, status: kind === 'deactivate' ? 'deactivated' : 'active' }
    }
    const path =
      kind === 'revoke' ? `/v1/sub-accounts/${subId}/api-keys/${key!.id}/revoke` : `/v1/sub-accounts/${subId}/${kind}`
    const change: Change = { kind, what: changed.id, callMs: Number.NaN, seen: { A: {}, B: {} } }
    const e = entity(changed.id)
    e.pending = true
    e.gen++
    const answer = await request(via.agent, via.base, { method: 'POST', path, headers: asParent }, 10_000).catch(
      (err: Error) => ({ status: 0, body: err.message, ms: Number.NaN }),
    )
    const t0 = performance.now()
    change.callMs = answer.ms
    if (answer.status !== 200) {
      // Left pending: whether it committed is unknown, so the load accepts either answer for it.
      change.error = `${kind} ${changed.id} through ${via.name}: ${answer.status} ${answer.body.slice(0, 200)}`
      if (key !== undefined) w.liveKeys.splice(w.liveKeys.indexOf(key), 1)
    } else {
      let seenOn = 0
      const settle = () => {
        if (++seenOn < 2) return
        Object.assign(e, { pending: false, status: changed.status, settledAt: performance.now() })
        e.gen++
      }
      const [a, b] = await Promise.all([watch(A, probes, t0, settle), watch(B, probes, t0, settle)])
      change.seen = { A: a, B: b }
      if (seenOn < 2) Object.assign(e, { pending: false, status: changed.status, settledAt: performance.now() })
      if (kind === 'deactivate') deactivatedAt.set(subId, performance.now())
      if (kind === 'reactivate') deactivatedAt.delete(subId)
      if (key !== undefined) {
        // Replaced through the other instance, so that the pool of live keys does not run dry.
        w.liveKeys.splice(w.liveKeys.indexOf(key), 1)
        w.revokedKeys = [...w.revokedKeys.slice(-19), key]
        w.liveKeys.push(await mint(subId))
      }
    }
    changes.push(change)
    await new Promise<void>((done) => {
      const timer = setTimeout(done, Math.random() * 1000)
      wake = () => {
        clearTimeout(timer)
        done()
      }
    })
  }
  return changes
}

// ---------------------------------------------------------------------------------------------
// The run.

interface Sample {
  t: number
  rss: number[]
  heap: number[]
  lag: number[]
  completed: number
}

async function main(): Promise<void> {
  const db = await createDatabase('soak')
  const prefix = `tgwsoak${randomBytes(4).toString('hex')}:`
  const servers: Server[] = []
  const instances: Instance[] = []
  let result: (() => string[]) | null = null
  try {
    const upstream = await startUpstream()
    servers.push(upstream)
    for (const name of ['A', 'B'] as const) {
      const g = await startGateway({
        databaseUrl: db.url,
        upstreamUrl: upstream.url,
        env: { REDIS_KEY_PREFIX: prefix, SHUTDOWN_DELAY_MS: '0', SHUTDOWN_TIMEOUT_MS: '10000' },
      })
      const instance: Instance = {
        ...g,
        name,
        agent: new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS }),
        base: new URL(g.url),
        warnings: 0,
      }
      // pino's levels: 40 warn, 50 error, 60 fatal.
      g.child.stdout!.on('data', (chunk: Buffer) => {
        instance.warnings += chunk.toString().match(/"level":[456]0\b/g)?.length ?? 0
      })
      instances.push(instance)
    }
    const [A, B] = instances as [Instance, Instance]

    // The parent by the CLI; sub-accounts (two in three with an external_id) and their keys by the API, alternating instances.
    const cli = JSON.parse(
      await runCli(['accounts', 'create', '--name', 'soak'], {
        DATABASE_URL: db.url,
        REDIS_URL,
        REDIS_KEY_PREFIX: prefix,
      }),
    ) as { account: { id: string }; api_key: string }
    const parent = { id: cli.account.id, apiKey: cli.api_key }
    const asParent = { authorization: `Bearer ${parent.apiKey}`, 'x-service-acting-tenant': 'self' }
    let turn = 0
    const api = async (path: string, body: object) => {
      const g = instances[turn++ % 2]!
      const a = await request(
        g.agent,
        g.base,
        { method: 'POST', path, headers: asParent, body: JSON.stringify(body) },
        10_000,
      )
      if (a.status !== 201) throw new Error(`${g.name}: POST ${path} answered ${a.status}: ${a.body.slice(0, 300)}`)
      return JSON.parse(a.body) as { id: string; api_key: string }
    }
    const mint = async (subId: string): Promise<Key> => {
      const minted = await api(`/v1/sub-accounts/${subId}/api-keys`, {
        name: 'soak',
        scopes: ['things:read', 'things:write'],
      })
      return { id: minted.id, apiKey: minted.api_key, subId }
    }
    console.error(`seeding ${SUBS} sub-accounts with ${KEYS} keys each…`)
    const subs = []
    for (let i = 0; i < SUBS; i++) {
      const externalId = i % 3 === 2 ? null : `soak-${i}`
      subs.push({
        id: (
          await api('/v1/sub-accounts', {
            name: `soak ${i}`,
            ...(externalId === null ? {} : { external_id: externalId }),
          })
        ).id,
        externalId,
      })
    }
    const keys = await Promise.all(subs.flatMap((s) => Array.from({ length: KEYS }, () => mint(s.id))))
    const world: World = { parent, subs, liveKeys: keys, revokedKeys: [] }

    const before = await Promise.all(instances.map((g) => scrape(g.metricsPort)))
    soakStart = performance.now()
    const deadline = soakStart + DURATION * 1000
    let stopping = false
    const loadDone = runLoad(
      world,
      instances.map((g) => ({ name: g.name, url: g.base, agent: g.agent })),
      () => stopping || isInterrupted(),
    )
    console.error(
      `soaking for ${DURATION} s, ${RATE > 0 ? `${RATE} req/s` : 'uncapped'} over ${CONNECTIONS} connections…`,
    )

    const samples: Sample[] = []
    const completed = () => [...tallies.values()].reduce((sum, t) => sum + t.count, 0)
    const takeSample = async () => {
      const scraped = await Promise.all(instances.map((g) => scrape(g.metricsPort)))
      const s: Sample = {
        t: (performance.now() - soakStart) / 1000,
        rss: instances.map((g) => rssBytes(g.child.pid) / 2 ** 20),
        heap: scraped.map((m) => metric(m, 'nodejs_heap_size_used_bytes') / 2 ** 20),
        lag: scraped.map((m) => metric(m, 'nodejs_eventloop_lag_p99_seconds') * 1000),
        completed: completed(),
      }
      samples.push(s)
      const errors = [...tallies.values()].reduce(
        (sum, t) => sum + Object.values(t.errors).reduce((a, b) => a + b, 0),
        0,
      )
      console.error(
        `  t=${s.t.toFixed(0)}s RSS A ${s.rss[0]!.toFixed(0)} MiB, B ${s.rss[1]!.toFixed(0)} MiB; ${fmt(s.completed)} requests, ${errors} errors`,
      )
    }
    await takeSample()
    const sampler = setInterval(() => void takeSample(), SAMPLE_MS)
    const changes = await changeLoop(world, A, B, deadline, mint)
    stopping = true
    await loadDone
    clearInterval(sampler)
    await takeSample()
    const after = await Promise.all(instances.map((g) => scrape(g.metricsPort)))
    result = () => report(changes, samples, before, after)
  } finally {
    const exits = await Promise.all(
      instances.map(async (g) => {
        const t0 = performance.now()
        const exit = await stopChild(g.child, 30_000)
        g.agent.destroy()
        return `${g.name} ${exit.signal !== null ? `killed by ${exit.signal}` : `exit status ${exit.code}`} ${ms(performance.now() - t0)} ms after SIGTERM${exit.code === 0 ? '' : '  !!'}`
      }),
    )
    for (const server of servers) await stopChild(server.child)
    await db.drop()
    const deleted = await deleteRedisPrefix(prefix)
    if (result !== null) {
      const lines = result()
      lines.push(
        `shutdown  ${exits.join('; ')}`,
        `cleanup   database ${db.name} dropped, ${deleted} Redis keys ${prefix}* deleted`,
      )
      lines.push(`log       lines at warn or above: ${instances.map((g) => `${g.name} ${g.warnings}`).join(', ')}`)
      const failed = lines.some((l) => l.includes('!!'))
      lines.push(`verdict   ${failed ? 'FAIL (the lines marked !!)' : 'PASS'}`)
      if (failed) process.exitCode = 1
      console.log(lines.join('\n'))
    }
  }
}

function report(changes: Change[], samples: Sample[], before: (Scrape | null)[], after: (Scrape | null)[]): string[] {
  const seconds = samples.at(-1)!.t
  const total = [...tallies.values()].reduce((sum, t) => sum + t.count, 0)
  const errorTotals: Record<string, number> = {}
  const rows = [...tallies].map(([kind, t]) => {
    for (const [type, n] of Object.entries(t.errors)) errorTotals[type] = (errorTotals[type] ?? 0) + n
    const sorted = Float64Array.from(t.latencies).sort()
    return [
      kind,
      fmt(t.count),
      fmt(t.expected),
      fmt(t.duringChange),
      counts(t.errors) || '0',
      ms(percentile(sorted, 0.5)),
      ms(percentile(sorted, 0.99)),
      ms(sorted.at(-1) ?? Number.NaN),
    ]
  })
  const lines = [
    ...reportHead('bench:soak'),
    `gateways  A and B, one database, one Redis prefix; 1 parent, ${SUBS} sub-accounts with ${KEYS} keys each`,
    `load      ${seconds.toFixed(0)} s, ${fmt(total)} requests (${fmt(total / seconds)} req/s, cap ${RATE || 'none'}), ${CONNECTIONS} connections, alternating A/B`,
    `changes   one at a time: revoke a key through A, deactivate a sub-account through B (at most ${MAX_DEACTIVATED} at once), reactivate it through A after ${REACTIVATE_AFTER_MS / 1000} s;`,
    `          each probed on A and B every ${PROBE_MS} ms until both answer the new way, and watched for ${WATCH_MS} ms`,
    '',
    ...table(['kind', 'count', 'as expected', 'overlapping a change', 'errors', 'p50 ms', 'p99 ms', 'max ms'], rows),
    `errors    ${Object.keys(errorTotals).length === 0 ? 'none' : `${counts(errorTotals)}  !!`}`,
    ...errorSamples.map((s) => `          ${s}`),
    '',
    'propagation: ms from the change call\'s answer to the answer of the first probe that saw it ("old until": the last probe that still got the old answer was sent)',
  ]
  const propagation: string[][] = []
  for (const kind of ['revoke', 'deactivate', 'reactivate'] as const) {
    const mine = changes.filter((c) => c.kind === kind && c.error === undefined)
    for (const probe of ['key', 'acting as uuid', 'own key']) {
      for (const name of ['A', 'B'] as const) {
        const seen = mine.map((c) => c.seen[name][probe]).filter((s) => s !== undefined)
        if (seen.length === 0) continue
        const times = Float64Array.from(seen.flatMap((s) => (s.effectMs === null ? [] : [s.effectMs]))).sort()
        const olds = seen.flatMap((s) => (s.oldUntilMs === null ? [] : [s.oldUntilMs]))
        const sum = (key: 'flaps' | 'others') => seen.reduce((n, s) => n + s[key], 0)
        const notSeen = seen.length - times.length
        propagation.push([
          kind,
          probe,
          name,
          fmt(seen.length),
          ms(percentile(times, 0.5)),
          ms(percentile(times, 0.99)),
          ms(times.at(-1) ?? Number.NaN),
          ms(Math.max(Number.NaN, ...olds)),
          `${notSeen}${notSeen > 0 ? ' !!' : ''}`,
          `${sum('flaps')}${sum('flaps') > 0 ? ' !!' : ''}`,
          String(sum('others')),
        ])
      }
    }
  }
  lines.push(
    ...table(
      ['change', 'probe', 'on', 'n', 'p50', 'p99', 'max', 'old until, max', 'not seen', 'flaps', 'other answers'],
      propagation,
      3,
    ),
  )
  for (const c of changes.filter((x) => x.error !== undefined)) lines.push(`!! change ${c.error}`)
  // The headline: each revocation's slower instance.
  const revocations = Float64Array.from(
    changes
      .filter((c) => c.kind === 'revoke' && c.error === undefined)
      .map((c) => Math.max(c.seen.A.key?.effectMs ?? Infinity, c.seen.B.key?.effectMs ?? Infinity)),
  ).sort()
  const p99 = percentile(revocations, 0.99)
  lines.push(
    `revocation on both instances: p50 ${ms(percentile(revocations, 0.5))} ms, p99 ${ms(p99)} ms, max ${ms(revocations.at(-1) ?? Number.NaN)} ms over ${revocations.length} ` +
      `(target ≤ 1000 ms p99: ${p99 <= 1000 ? 'met' : 'NOT MET  !!'})`,
    '',
  )
  // Memory: every sample up to twenty rows, and the first minute against the last.
  const every = Math.max(1, Math.ceil(samples.length / 20))
  const shown = samples.filter((_, i) => i % every === 0 || i === samples.length - 1)
  lines.push(
    ...table(
      ['t s', 'A RSS MiB', 'A heap MiB', 'A lag p99 ms', 'B RSS MiB', 'B heap MiB', 'B lag p99 ms', 'requests'],
      shown.map((s) => [
        s.t.toFixed(0),
        ...[0, 1].flatMap((i) => [s.rss[i]!.toFixed(1), s.heap[i]!.toFixed(1), ms(s.lag[i]!)]),
        fmt(s.completed),
      ]),
    ),
  )
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
  for (const [i, name] of ['A', 'B'].entries()) {
    const first = mean(samples.filter((s) => s.t <= 60).map((s) => s.rss[i]!))
    const last = mean(samples.filter((s) => s.t >= seconds - 60).map((s) => s.rss[i]!))
    lines.push(
      `RSS ${name}     first-minute mean ${first.toFixed(1)} MiB → last-minute mean ${last.toFixed(1)} MiB (${(((last - first) / first) * 100).toFixed(1)}%)`,
    )
  }
  const counters: [string, string, ...string[]][] = [
    ['Postgres lookups', 'tgw_store_lookups_total', 'tier="postgres"'],
    ['Redis lookups', 'tgw_store_lookups_total', 'tier="redis"'],
    ['background refreshes', 'tgw_cache_refreshes_total'],
    ['in-process misses', 'tgw_cache_misses_total', 'tier="local"'],
    ['invalidations received', 'tgw_cache_invalidations_received_total'],
    ['Redis errors', 'tgw_redis_errors_total'],
    ['usage flush failures', 'tgw_usage_flush_failures_total'],
    ['5xx answers', 'tgw_http_requests_total', 'status_class="5xx"'],
  ]
  lines.push(
    '',
    ...table(
      ['counter, over the soak', 'A', 'B'],
      counters.map(([label, name, ...labels]) => [
        label,
        ...[0, 1].map((i) => fmt(metric(after[i], name, ...labels) - metric(before[i], name, ...labels))),
      ]),
    ),
  )
  return lines
}

run(main)
