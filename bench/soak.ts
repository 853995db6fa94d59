// Soak (issue 5), run by hand:
//   npm run bench:soak                      (ten minutes)
//   SOAK_DURATION=60 npm run bench:soak     (a smoke run)
// env (defaults): SOAK_DURATION=600 s, SOAK_CONNECTIONS=16 (concurrent requests), SOAK_RATE=400
// (requests/s over both instances; 0: as fast as the connections go), SOAK_SUBS=50 sub-accounts
// (two in three with an external_id), SOAK_KEYS=4 keys per sub-account, SOAK_CHANGE_GAP_MS=1000
// (a random pause of up to this between changes), SOAK_WATCH_MS=1200 (how long each change is
// watched on both instances after its call answered), SOAK_PROBE_INTERVAL_MS=5,
// SOAK_EFFECT_TIMEOUT_MS=10000, SOAK_REACTIVATE_AFTER_S=6, SOAK_MAX_DEACTIVATED=SUBS/10,
// SOAK_TIMEOUT_MS=5000 (per request), SOAK_GRACE_MS=0, SOAK_SAMPLE_S=10 (memory samples),
// BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres, BENCH_REDIS_URL=redis://127.0.0.1:6379,
// BENCH_NODE=image (the gateways' and the upstream's node, as in bench/proxy.ts; bench/lib.ts).
//
// What runs, each in its own process: an upstream (node:http; it answers every request with the
// identity headers it received), two gateways A and B (`node --import tsx src/main.ts`) on one
// fresh Postgres database (created here, dropped at the end) and one Redis with a key prefix of
// this run's own (its keys deleted at the end), and a load generator (this file in the `load`
// role: node:http clients with keep-alive, requests alternating A/B, rate-capped). This process
// seeds one parent (CLI) with sub-accounts and keys (API), then runs the change loop: revoke a
// key through A, deactivate a sub-account through B, reactivate it through A some seconds later,
// one change at a time. After each change's call has answered, both instances are probed every
// SOAK_PROBE_INTERVAL_MS with the affected key or target until they answer the new way; that time
// is the change's propagation on that instance. Probing goes on until SOAK_WATCH_MS, and a probe
// that answers the old way again after the new one is a "flap". Every 10 s this process reads each
// gateway's RSS (/proc) and its /metrics.
//
// How a response is judged. Each request names the entities it depends on (a sub-account key and
// its sub-account, or the sub-account a parent acts as). An entity is *settled* from the moment
// the load generator hears that the change was seen on both instances (plus SOAK_GRACE_MS) until
// the next change to it begins; before a change's call is sent, the load generator is told and
// acknowledges, so a request sent before that counts as sent in the old state. A request whose
// entities were all settled from its sending to its answer has exactly one right answer; one
// that overlapped a change may get the old or the new answer. Errors are: 5xx, connection
// errors, timeouts, and wrong answers: a leak (let through although revoked or deactivated and
// settled), a false refusal (refused although active and settled), a request that reached the
// upstream as the wrong tenant, a management read that shows a settled sub-account in the wrong
// status, and any other status than the one expected. Expected refusals (401 for a revoked or
// unknown key, 403 acting_tenant_deactivated, 403 tenant_deactivated, 400 for a malformed acting
// header…) are not errors.
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import http from 'node:http'
import { type AddressInfo } from 'node:net'
import os from 'node:os'
import { performance } from 'node:perf_hooks'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import postgres from 'postgres'
import {
  ADMIN_URL,
  alive,
  announce,
  children,
  envForCommand,
  fmt,
  forkChild,
  freePorts,
  gatewayArgs,
  gitDescription,
  packageVersion,
  percentile,
  positiveInt,
  REDIS_URL,
  ROOT,
  runCli,
  serverNode,
  type ServerNode,
  sleep,
  stopChild,
  waitForGateway,
} from './lib.js'

const SELF = fileURLToPath(import.meta.url)
const BENCH = 'bench/soak.ts'

function nonNegativeInt(name: string, fallback: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a non-negative integer, got "${raw}"`)
  return Number(raw)
}

// ---------------------------------------------------------------------------------------------
// HTTP, shared by the load generator and the change loop.

interface Answer {
  status: number
  body: string
  /** From sending to the last byte of the answer. */
  ms: number
}

class RequestFailed extends Error {
  constructor(
    readonly type: 'timeout' | 'connection',
    message: string,
  ) {
    super(message)
  }
}

interface Call {
  method: 'GET' | 'POST'
  path: string
  headers: Record<string, string>
  /** JSON text; a POST without one is sent with Content-Length: 0. */
  body?: string
}

function send(agent: http.Agent, base: URL, call: Call, timeoutMs: number): Promise<Answer> {
  return new Promise((done, fail) => {
    const started = performance.now()
    const headers: Record<string, string | number> = { ...call.headers }
    if (call.body !== undefined) {
      headers['content-type'] = 'application/json'
      headers['content-length'] = Buffer.byteLength(call.body)
    } else if (call.method === 'POST') {
      headers['content-length'] = 0
    }
    let settled = false
    const request = http.request(
      { agent, host: base.hostname, port: base.port, method: call.method, path: call.path, headers },
      (response) => {
        const chunks: Buffer[] = []
        response.on('data', (chunk: Buffer) => chunks.push(chunk))
        response.on('end', () => {
          if (settled) return
          settled = true
          clearTimeout(timer)
          done({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), ms: performance.now() - started })
        })
        response.on('error', (err) => finish(new RequestFailed('connection', err.message)))
      },
    )
    const finish = (err: RequestFailed) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      request.destroy()
      fail(err)
    }
    const timer = setTimeout(() => finish(new RequestFailed('timeout', `no answer within ${timeoutMs} ms`)), timeoutMs)
    request.on('error', (err: NodeJS.ErrnoException) => finish(new RequestFailed('connection', err.code ?? err.message)))
    request.end(call.body)
  })
}

const problemCode = (body: string): string | null => {
  try {
    const parsed = JSON.parse(body) as { code?: unknown }
    return typeof parsed.code === 'string' ? parsed.code : null
  } catch {
    return null
  }
}

/**
 * A proxied request's outcome: `ok` when the upstream answered and saw the expected tenants,
 * `wrong tenant` when it saw others, else the status and the problem's code.
 */
function proxiedOutcome(answer: Answer, tenant: string, caller: string): string {
  if (answer.status === 200) {
    try {
      const seen = JSON.parse(answer.body) as { tenant?: unknown; caller?: unknown }
      return seen.tenant === tenant && seen.caller === caller ? 'ok' : 'wrong tenant'
    } catch {
      return 'wrong tenant'
    }
  }
  return `${answer.status} ${problemCode(answer.body) ?? '-'}`
}

const UNAUTHENTICATED = '401 unauthenticated'
const TARGET_DEACTIVATED = '403 acting_tenant_deactivated'
const OWN_DEACTIVATED = '403 tenant_deactivated'
const REFUSALS = new Set([UNAUTHENTICATED, TARGET_DEACTIVATED, OWN_DEACTIVATED])

const PROXY_PATH = '/v1/things'
const SCOPES = ['things:read', 'things:write']

// ---------------------------------------------------------------------------------------------
// The upstream: `tsx bench/soak.ts upstream`. Reads each body, answers 200 with what it saw.

async function runUpstream(): Promise<void> {
  const server = http.createServer((req, res) => {
    let bytes = 0
    req.on('data', (chunk: Buffer) => {
      bytes += chunk.length
    })
    req.on('end', () => {
      const body = Buffer.from(
        JSON.stringify({
          tenant: req.headers['x-service-resolved-tenant'] ?? null,
          caller: req.headers['x-service-caller-tenant'] ?? null,
          key: req.headers['x-service-key-id'] ?? null,
          bytes,
        }),
      )
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
      res.end(body)
    })
  })
  server.keepAliveTimeout = 120_000
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done))
  // Stopped by this bench (SIGTERM or its going away), not by a Ctrl-C meant for the bench.
  process.on('SIGINT', () => {})
  announce((server.address() as AddressInfo).port, BENCH)
}

// ---------------------------------------------------------------------------------------------
// The load generator: `tsx bench/soak.ts load`, driven over IPC.

interface SubInfo {
  id: string
  externalId: string | null
}
interface KeyInfo {
  id: string
  apiKey: string
  subId: string
}
interface Instance {
  name: 'A' | 'B'
  base: string
}
interface Plan {
  instances: Instance[]
  parent: { id: string; apiKey: string }
  subs: SubInfo[]
  keys: KeyInfo[]
  connections: number
  /** Requests per second over both instances; 0: no cap. */
  rate: number
  timeoutMs: number
  graceMs: number
  progressEveryMs: number
}

type EntityStatus = 'active' | 'revoked' | 'deactivated'

type ToLoad =
  | { type: 'init'; plan: Plan }
  | { type: 'begin'; seq: number; entities: string[] }
  | { type: 'settle'; entities: { id: string; status: EntityStatus }[] }
  | { type: 'add-key'; key: KeyInfo }
  | { type: 'stop' }

interface KindResult {
  kind: string
  count: number
  expected: number
  /** Answers to requests that overlapped a change, by outcome. */
  duringChange: Record<string, number>
  errors: Record<string, number>
  p50: number
  p99: number
  max: number
}
interface LoadResult {
  type: 'result'
  seconds: number
  kinds: KindResult[]
  instances: { name: string; count: number; errors: number; p50: number; p99: number }[]
  errorSamples: string[]
}
type FromLoad =
  | { type: 'ready'; port: number }
  | { type: 'ack'; seq: number }
  | { type: 'progress'; completed: number; errors: number }
  | LoadResult

const keyEntity = (id: string) => `key:${id}`
const subEntity = (id: string) => `sub:${id}`

/** The request kinds and their shares of the traffic. */
const KINDS = [
  ['proxy GET, parent as ext:', 20],
  ['proxy GET, parent as uuid', 12],
  ['proxy POST, parent as uuid', 8],
  ['proxy POST, parent as ext:', 5],
  ['proxy GET, parent as self', 5],
  ['proxy GET, sub-account key', 20],
  ['proxy POST, sub-account key', 10],
  ['mgmt list sub-accounts', 2],
  ['mgmt get sub-account', 3],
  ['mgmt list api-keys', 1],
  ['mgmt usage', 1],
  ['bad: unknown key', 2],
  ['bad: malformed key', 1],
  ['bad: malformed acting header', 2],
  ['bad: acting as a stranger', 1],
  ['bad: write without acting header', 1],
] as const
type Kind = (typeof KINDS)[number][0]

async function runLoad(): Promise<void> {
  process.on('SIGINT', () => {})
  const { generateApiKey } = await import('../src/auth/keys.js')
  announce(0, BENCH)
  const plan = await new Promise<Plan>((done) => {
    const first = (message: ToLoad) => {
      if (message.type !== 'init') return
      process.off('message', first)
      done(message.plan)
    }
    process.on('message', first)
  })
  const tell = (message: FromLoad) => process.send?.(message)

  // What each entity is, and whether a change to it is under way.
  interface Entity {
    status: EntityStatus
    pending: boolean
    /** Bumped when a change begins and when it settles. */
    gen: number
    strictFrom: number
    settledAt: number
  }
  const entities = new Map<string, Entity>()
  const entity = (id: string): Entity => {
    let e = entities.get(id)
    if (e === undefined) {
      e = { status: 'active', pending: false, gen: 0, strictFrom: 0, settledAt: 0 }
      entities.set(id, e)
    }
    return e
  }
  const subs = plan.subs
  const withExternalId = subs.filter((s) => s.externalId !== null)
  const liveKeys: KeyInfo[] = [...plan.keys]
  const revokedKeys: KeyInfo[] = []
  for (const s of subs) entity(subEntity(s.id))
  for (const k of liveKeys) entity(keyEntity(k.id))

  let stopping = false
  process.on('message', (message: ToLoad) => {
    const now = performance.now()
    if (message.type === 'begin') {
      for (const id of message.entities) {
        const e = entity(id)
        e.pending = true
        e.gen++
      }
      tell({ type: 'ack', seq: message.seq })
    } else if (message.type === 'settle') {
      for (const { id, status } of message.entities) {
        const e = entity(id)
        e.pending = false
        e.gen++
        e.status = status
        e.settledAt = now
        e.strictFrom = now + plan.graceMs
        if (status === 'revoked' && id.startsWith('key:')) {
          const at = liveKeys.findIndex((k) => keyEntity(k.id) === id)
          if (at !== -1) {
            revokedKeys.push(...liveKeys.splice(at, 1))
            // A few recent ones are enough to try.
            if (revokedKeys.length > 20) revokedKeys.shift()
          }
        }
      }
    } else if (message.type === 'add-key') {
      entity(keyEntity(message.key.id))
      liveKeys.push(message.key)
    } else if (message.type === 'stop') {
      stopping = true
    }
  })

  const pick = <T>(list: readonly T[]): T => list[Math.floor(Math.random() * list.length)]!
  const totalWeight = KINDS.reduce((sum, [, w]) => sum + w, 0)
  const pickKind = (): Kind => {
    let r = Math.random() * totalWeight
    for (const [kind, w] of KINDS) {
      r -= w
      if (r < 0) return kind
    }
    return KINDS[0][0]
  }

  // Tallies.
  const started = performance.now()
  const stats = new Map<Kind, { count: number; expected: number; duringChange: Record<string, number>; errors: Record<string, number>; ms: number[] }>()
  for (const [kind] of KINDS) stats.set(kind, { count: 0, expected: 0, duringChange: {}, errors: {}, ms: [] })
  const perInstance = new Map<string, { count: number; errors: number; ms: number[] }>(plan.instances.map((i) => [i.name, { count: 0, errors: 0, ms: [] }]))
  const errorSamples: string[] = []
  let completed = 0
  let errorCount = 0

  function recordError(kind: Kind, instance: string, type: string, detail: string): void {
    const s = stats.get(kind)!
    s.errors[type] = (s.errors[type] ?? 0) + 1
    perInstance.get(instance)!.errors++
    errorCount++
    if (errorSamples.length < 40) errorSamples.push(`t=${((performance.now() - started) / 1000).toFixed(1)}s ${instance} ${kind}: ${type}: ${detail}`)
  }

  /** The answers a request may get, from the states of its entities when it was sent. */
  interface Expectation {
    /** The entities, with their generation when the request was sent. */
    snapshot: { id: string; e: Entity; gen: number; strict: boolean }[]
    /** The right answers if every entity stays settled. */
    settled: Set<string>
    /** The answers acceptable while a change overlaps the request. */
    any: Set<string>
  }
  const snap = (ids: string[], now: number) =>
    ids.map((id) => {
      const e = entity(id)
      return { id, e, gen: e.gen, strict: !e.pending && now >= e.strictFrom }
    })
  /** Parent acting as a sub-account. */
  function expectTarget(sub: SubInfo, now: number): Expectation {
    const snapshot = snap([subEntity(sub.id)], now)
    const s = snapshot[0]!
    const answer = s.e.status === 'active' ? 'ok' : TARGET_DEACTIVATED
    return { snapshot, settled: new Set(s.strict ? [answer] : ['ok', TARGET_DEACTIVATED]), any: new Set(['ok', TARGET_DEACTIVATED]) }
  }
  /** A sub-account's own key. */
  function expectOwnKey(key: KeyInfo, now: number): Expectation {
    const snapshot = snap([keyEntity(key.id), subEntity(key.subId)], now)
    const [k, s] = snapshot as [(typeof snapshot)[0], (typeof snapshot)[0]]
    const subAnswers = s.strict ? [s.e.status === 'active' ? 'ok' : OWN_DEACTIVATED] : ['ok', OWN_DEACTIVATED]
    let answers: string[]
    if (k.strict) answers = k.e.status === 'revoked' ? [UNAUTHENTICATED] : subAnswers
    else answers = [UNAUTHENTICATED, ...subAnswers]
    return { snapshot, settled: new Set(answers), any: new Set(['ok', UNAUTHENTICATED, OWN_DEACTIVATED]) }
  }

  function judge(kind: Kind, instance: string, outcome: string, status: number, expectation: Expectation, extra = ''): void {
    const s = stats.get(kind)!
    const changed = expectation.snapshot.some((x) => x.e.gen !== x.gen)
    const allowed = changed ? expectation.any : expectation.settled
    if (allowed.has(outcome)) {
      if (allowed.size > 1) s.duringChange[outcome] = (s.duringChange[outcome] ?? 0) + 1
      else s.expected++
      return
    }
    const now = performance.now()
    const states = expectation.snapshot
      .map((x) => `${x.id.slice(0, 12)} ${x.e.status}${x.e.pending ? ' (changing)' : ` settled ${(now - x.e.settledAt).toFixed(0)} ms ago`}`)
      .join(', ')
    const detail = `answered ${outcome}, expected ${[...allowed].join(' | ')} [${states}]${extra}`
    let type: string
    if (status >= 500) type = '5xx'
    else if (outcome === 'wrong tenant') type = 'wrong tenant'
    else if (outcome === 'ok') type = 'leak'
    else if (REFUSALS.has(outcome) && allowed.size === 1 && allowed.has('ok')) type = 'false refusal'
    else type = 'unexpected status'
    recordError(kind, instance, type, detail)
  }

  function judgeFixed(kind: Kind, instance: string, answer: Answer, expected: string): void {
    const s = stats.get(kind)!
    const outcome = answer.status === 200 ? '200' : `${answer.status} ${problemCode(answer.body) ?? '-'}`
    if (outcome === expected) s.expected++
    else recordError(kind, instance, answer.status >= 500 ? '5xx' : 'unexpected status', `answered ${outcome}, expected ${expected}`)
  }

  const parentAuth = { authorization: `Bearer ${plan.parent.apiKey}` }
  const body = () => JSON.stringify({ item: randomBytes(6).toString('hex'), n: Math.floor(Math.random() * 1000) })

  /** One request of `kind`: what to send, and how to judge its answer. */
  function build(kind: Kind, now: number): { call: Call; judge: (instance: string, answer: Answer) => void } {
    const thing = `${PROXY_PATH}/${Math.floor(Math.random() * 1000)}`
    switch (kind) {
      case 'proxy GET, parent as ext:':
      case 'proxy POST, parent as ext:':
      case 'proxy GET, parent as uuid':
      case 'proxy POST, parent as uuid': {
        const byExt = kind.endsWith('ext:') && withExternalId.length > 0
        const sub = pick(byExt ? withExternalId : subs)
        const expectation = expectTarget(sub, now)
        const post = kind.startsWith('proxy POST')
        const call: Call = {
          method: post ? 'POST' : 'GET',
          path: post ? PROXY_PATH : thing,
          headers: { ...parentAuth, 'x-service-acting-tenant': byExt ? `ext:${sub.externalId}` : sub.id },
          ...(post ? { body: body() } : {}),
        }
        return { call, judge: (instance, a) => judge(kind, instance, proxiedOutcome(a, sub.id, plan.parent.id), a.status, expectation) }
      }
      case 'proxy GET, parent as self':
        return {
          call: { method: 'GET', path: thing, headers: { ...parentAuth, 'x-service-acting-tenant': 'self' } },
          judge: (instance, a) => {
            const outcome = proxiedOutcome(a, plan.parent.id, plan.parent.id)
            judge(kind, instance, outcome, a.status, { snapshot: [], settled: new Set(['ok']), any: new Set(['ok']) })
          },
        }
      case 'proxy GET, sub-account key':
      case 'proxy POST, sub-account key': {
        // Mostly live keys; one in twenty a recently revoked one.
        const key = revokedKeys.length > 0 && Math.random() < 0.05 ? pick(revokedKeys) : pick(liveKeys)
        const expectation = expectOwnKey(key, now)
        const post = kind === 'proxy POST, sub-account key'
        const call: Call = post
          ? { method: 'POST', path: PROXY_PATH, headers: { authorization: `Bearer ${key.apiKey}`, 'x-service-acting-tenant': 'self' }, body: body() }
          : { method: 'GET', path: thing, headers: { authorization: `Bearer ${key.apiKey}` } }
        return { call, judge: (instance, a) => judge(kind, instance, proxiedOutcome(a, key.subId, key.subId), a.status, expectation) }
      }
      case 'mgmt list sub-accounts':
        return {
          call: { method: 'GET', path: '/v1/sub-accounts?limit=20', headers: parentAuth },
          judge: (instance, a) => judgeFixed(kind, instance, a, '200'),
        }
      case 'mgmt get sub-account': {
        const sub = pick(subs)
        const [s] = snap([subEntity(sub.id)], now)
        return {
          call: { method: 'GET', path: `/v1/sub-accounts/${sub.id}`, headers: parentAuth },
          judge: (instance, a) => {
            if (a.status !== 200) return judgeFixed(kind, instance, a, '200')
            let status: unknown
            try {
              status = (JSON.parse(a.body) as { status?: unknown }).status
            } catch {
              status = null
            }
            const want = s!.e.status === 'active' ? 'active' : 'deactivated'
            // Management reads come from Postgres: once a change has answered they must show it.
            if (s!.strict && s!.e.gen === s!.gen && status !== want) {
              recordError(kind, instance, 'stale read', `status ${String(status)}, expected ${want} (settled ${(performance.now() - s!.e.settledAt).toFixed(0)} ms ago)`)
            } else if (status !== 'active' && status !== 'deactivated') {
              recordError(kind, instance, 'unexpected status', `body without a status: ${a.body.slice(0, 200)}`)
            } else {
              stats.get(kind)!.expected++
            }
          },
        }
      }
      case 'mgmt list api-keys': {
        const sub = pick(subs)
        return {
          call: { method: 'GET', path: `/v1/sub-accounts/${sub.id}/api-keys?limit=10`, headers: parentAuth },
          judge: (instance, a) => judgeFixed(kind, instance, a, '200'),
        }
      }
      case 'mgmt usage':
        return { call: { method: 'GET', path: '/v1/sub-accounts/usage', headers: parentAuth }, judge: (instance, a) => judgeFixed(kind, instance, a, '200') }
      case 'bad: unknown key':
        // Well-formed, right checksum, never minted: it reaches the store (a fresh one each time).
        return {
          call: { method: 'GET', path: thing, headers: { authorization: `Bearer ${generateApiKey().apiKey}` } },
          judge: (instance, a) => judgeFixed(kind, instance, a, UNAUTHENTICATED),
        }
      case 'bad: malformed key':
        return {
          call: { method: 'GET', path: thing, headers: { authorization: 'Bearer tgw_not-a-key' } },
          judge: (instance, a) => judgeFixed(kind, instance, a, UNAUTHENTICATED),
        }
      case 'bad: malformed acting header': {
        const value = pick(['ext:', 'SELF', 'nobody', `${pick(subs).id},self`, 'ext:has space'])
        return {
          call: { method: 'GET', path: thing, headers: { ...parentAuth, 'x-service-acting-tenant': value } },
          judge: (instance, a) => judgeFixed(kind, instance, a, '400 acting_tenant_malformed'),
        }
      }
      case 'bad: acting as a stranger':
        return {
          call: { method: 'GET', path: thing, headers: { ...parentAuth, 'x-service-acting-tenant': pick([randomUUID(), 'ext:nobody-here']) } },
          judge: (instance, a) => judgeFixed(kind, instance, a, '403 acting_tenant_forbidden'),
        }
      case 'bad: write without acting header':
        // The parent always has active sub-accounts (at most a tenth are ever deactivated).
        return {
          call: { method: 'POST', path: PROXY_PATH, headers: parentAuth, body: body() },
          judge: (instance, a) => judgeFixed(kind, instance, a, '400 acting_tenant_required'),
        }
    }
  }

  const targets = plan.instances.map((i) => ({
    name: i.name,
    base: new URL(i.base),
    agent: new http.Agent({ keepAlive: true, maxSockets: plan.connections }),
  }))
  let turn = 0
  const interval = plan.rate > 0 ? 1000 / plan.rate : 0
  let nextSlot = performance.now()

  async function worker(): Promise<void> {
    while (!stopping) {
      if (interval > 0) {
        const now = performance.now()
        const at = Math.max(now, nextSlot)
        nextSlot = at + interval
        if (at - now >= 1) await sleep(at - now)
        if (stopping) break
      }
      const target = targets[turn++ % targets.length]!
      const kind = pickKind()
      const { call, judge: judgeAnswer } = build(kind, performance.now())
      const s = stats.get(kind)!
      s.count++
      perInstance.get(target.name)!.count++
      try {
        const answer = await send(target.agent, target.base, call, plan.timeoutMs)
        s.ms.push(answer.ms)
        perInstance.get(target.name)!.ms.push(answer.ms)
        judgeAnswer(target.name, answer)
      } catch (err) {
        if (err instanceof RequestFailed) recordError(kind, target.name, err.type === 'timeout' ? 'timeout' : 'connection error', err.message)
        else recordError(kind, target.name, 'bench bug', String(err))
      }
      completed++
    }
  }

  const progress = setInterval(() => tell({ type: 'progress', completed, errors: errorCount }), plan.progressEveryMs)
  await Promise.all(Array.from({ length: plan.connections }, () => worker()))
  clearInterval(progress)
  tell({ type: 'progress', completed, errors: errorCount })
  const seconds = (performance.now() - started) / 1000
  for (const t of targets) t.agent.destroy()

  const summary = (ms: number[]) => {
    const sorted = Float64Array.from(ms).sort()
    return sorted.length === 0 ? { p50: Number.NaN, p99: Number.NaN, max: Number.NaN } : { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), max: sorted[sorted.length - 1]! }
  }
  tell({
    type: 'result',
    seconds,
    kinds: KINDS.map(([kind]) => {
      const s = stats.get(kind)!
      return { kind, count: s.count, expected: s.expected, duringChange: s.duringChange, errors: s.errors, ...summary(s.ms) }
    }),
    instances: [...perInstance].map(([name, p]) => ({ name, count: p.count, errors: p.errors, ...summary(p.ms) })),
    errorSamples,
  })
}

// ---------------------------------------------------------------------------------------------
// The parent.

const DURATION = positiveInt('SOAK_DURATION', 600)
const CONNECTIONS = positiveInt('SOAK_CONNECTIONS', 16)
const RATE = nonNegativeInt('SOAK_RATE', 400)
const SUBS = positiveInt('SOAK_SUBS', 50)
const KEYS = positiveInt('SOAK_KEYS', 4)
const CHANGE_GAP_MS = nonNegativeInt('SOAK_CHANGE_GAP_MS', 1000)
const WATCH_MS = nonNegativeInt('SOAK_WATCH_MS', 1200)
const PROBE_INTERVAL_MS = positiveInt('SOAK_PROBE_INTERVAL_MS', 5)
const EFFECT_TIMEOUT_MS = positiveInt('SOAK_EFFECT_TIMEOUT_MS', 10_000)
const REACTIVATE_AFTER_S = positiveInt('SOAK_REACTIVATE_AFTER_S', 6)
const MAX_DEACTIVATED = positiveInt('SOAK_MAX_DEACTIVATED', Math.max(1, Math.floor(SUBS / 10)))
const TIMEOUT_MS = positiveInt('SOAK_TIMEOUT_MS', 5000)
const GRACE_MS = nonNegativeInt('SOAK_GRACE_MS', 0)
const SAMPLE_S = positiveInt('SOAK_SAMPLE_S', 10)

// Ctrl-C ends the soak early (the report covers what ran) and cleans up; a second one kills the
// children at once and leaves the database and the Redis keys (named on stderr).
let interrupted = false
let onInterrupt: () => void = () => {}
let leftovers = ''
function onSignals(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (interrupted) {
        console.error(`\n${signal} again: killing the children at once${leftovers}`)
        for (const child of children) if (alive(child)) child.kill('SIGKILL')
        process.exit(130)
      }
      interrupted = true
      console.error(`\n${signal}: stopping and cleaning up (again to kill at once)…`)
      onInterrupt()
    })
  }
}
function checkInterrupted(): void {
  if (interrupted) throw new Error('interrupted')
}

// Metrics, in the Prometheus text format.
type Scrape = Map<string, number>
async function scrape(port: number): Promise<Scrape | null> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(3000) })
    if (!response.ok) return null
    const series: Scrape = new Map()
    for (const line of (await response.text()).split('\n')) {
      const match = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line)
      if (match !== null) series.set(match[1]! + (match[2] ?? ''), Number(match[3]))
    }
    return series
  } catch {
    return null
  }
}
/** The sum of a metric's series whose labels include every `label="value"` given. */
function metric(scraped: Scrape | null | undefined, name: string, ...labels: string[]): number {
  if (scraped === null || scraped === undefined) return Number.NaN
  // A labelled counter has no series until its first increment: absent is 0.
  let sum = 0
  for (const [series, value] of scraped) {
    if (series !== name && !series.startsWith(`${name}{`)) continue
    if (labels.every((l) => series.includes(l))) sum += value
  }
  return sum
}

function rssBytes(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN
  try {
    const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return match === null ? Number.NaN : Number(match[1]) * 1024
  } catch {
    return Number.NaN
  }
}

interface Gateway {
  name: 'A' | 'B'
  base: string
  url: URL
  metricsPort: number
  child: ChildProcess
  agent: http.Agent
  /** Lines at warn or above (or not JSON), by message. */
  logs: Map<string, { count: number; example: string }>
  lines: number
  tail: () => string
  exit?: { code: number | null; signal: string | null; ms: number }
}

/** Counts the gateway's log lines at warn or above by message, and keeps a tail. */
function watchOutput(g: Gateway): void {
  let tail = ''
  let partial = ''
  const take = (chunk: Buffer) => {
    const text = chunk.toString('utf8')
    tail = (tail + text).slice(-16_384)
    const lines = (partial + text).split('\n')
    partial = lines.pop()!
    for (const line of lines) {
      if (line.trim() === '') continue
      g.lines++
      let key: string
      try {
        const parsed = JSON.parse(line) as { level?: number; msg?: string; err?: { message?: string } }
        if ((parsed.level ?? 0) < 40) continue
        const level = parsed.level! >= 50 ? 'error' : 'warn'
        key = `${level}: ${parsed.msg ?? '(no msg)'}${parsed.err?.message ? ` (${parsed.err.message.slice(0, 120)})` : ''}`
      } catch {
        key = `not JSON: ${line.slice(0, 120)}`
      }
      const seen = g.logs.get(key)
      if (seen === undefined) g.logs.set(key, { count: 1, example: line.slice(0, 400) })
      else seen.count++
    }
  }
  g.child.stdout?.on('data', take)
  g.child.stderr?.on('data', take)
  g.tail = () => tail
}

async function api(g: Gateway, call: Call, expected: number): Promise<{ body: string; ms: number }> {
  const answer = await send(g.agent, g.url, call, 10_000)
  if (answer.status !== expected) throw new Error(`${g.name}: ${call.method} ${call.path} answered ${answer.status}, expected ${expected}: ${answer.body.slice(0, 300)}`)
  return answer
}

/** Runs `task` over `items`, `concurrency` at a time. */
async function inParallel<T, R>(items: T[], concurrency: number, task: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length)
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) {
        const i = next++
        results[i] = await task(items[i]!, i)
      }
    }),
  )
  return results
}

// The change loop's measurements.
type ChangeKind = 'revoke' | 'deactivate' | 'reactivate'
interface Probe {
  name: string
  call: Call
  tenant: string
  caller: string
  /** The answer once the change took effect. */
  want: string
}
interface ProbeResult {
  /** ms from the change call's answer to the answer of the first probe that saw the change; null: never. */
  effectMs: number | null
  /**
   * ms from the change call's answer to the sending of the last probe that still got the old
   * answer (null: none did). The change took effect between this and effectMs.
   */
  oldUntilMs: number | null
  /** Answers the old way after the new way had been seen. */
  flaps: number
  /** Answers neither the old nor the new way (5xx, errors…), by outcome. */
  anomalies: Record<string, number>
  polls: number
}
interface Change {
  kind: ChangeKind
  via: 'A' | 'B'
  /** Seconds into the soak. */
  at: number
  what: string
  callMs: number
  /** By instance, then by probe name. */
  results: Record<'A' | 'B', Record<string, ProbeResult>>
  error?: string
}

/**
 * Probes one instance from t0 until every probe has answered `want` (then `onSeen`), and on until
 * t0 + WATCH_MS, or until EFFECT_TIMEOUT_MS without the change.
 */
async function watchInstance(g: Gateway, probes: Probe[], old: Record<string, string>, t0: number, onSeen: () => void): Promise<Record<string, ProbeResult>> {
  const results: Record<string, ProbeResult> = {}
  for (const p of probes) results[p.name] = { effectMs: null, oldUntilMs: null, flaps: 0, anomalies: {}, polls: 0 }
  let seenAll = false
  for (;;) {
    await Promise.all(
      probes.map(async (p) => {
        const r = results[p.name]!
        r.polls++
        const sentAt = performance.now()
        let outcome: string
        try {
          outcome = proxiedOutcome(await send(g.agent, g.url, p.call, 5000), p.tenant, p.caller)
        } catch (err) {
          outcome = err instanceof RequestFailed ? err.type : String(err)
        }
        const now = performance.now()
        if (outcome === p.want) {
          if (r.effectMs === null) r.effectMs = now - t0
        } else if (outcome === old[p.name]) {
          if (r.effectMs !== null) r.flaps++
          else r.oldUntilMs = sentAt - t0
        } else {
          r.anomalies[outcome] = (r.anomalies[outcome] ?? 0) + 1
        }
      }),
    )
    const elapsed = performance.now() - t0
    if (!seenAll && probes.every((p) => results[p.name]!.effectMs !== null)) {
      seenAll = true
      onSeen()
    }
    if (seenAll && elapsed >= WATCH_MS) break
    if (!seenAll && elapsed >= EFFECT_TIMEOUT_MS) break
    if (interrupted && !seenAll) break
    await sleep(seenAll ? Math.max(PROBE_INTERVAL_MS, 20) : PROBE_INTERVAL_MS)
  }
  if (!seenAll) onSeen()
  return results
}

async function main(): Promise<void> {
  const startedAt = new Date()
  const loadAverageBefore = os.loadavg()
  const dbName = `tgw_soak_${randomBytes(6).toString('hex')}`
  const redisPrefix = `tgwsoak${randomBytes(4).toString('hex')}:`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  const dbUrl = new URL(ADMIN_URL)
  dbUrl.pathname = `/${dbName}`
  leftovers = `; left behind: database ${dbName}, Redis keys ${redisPrefix}*`
  let created = false
  let upstream: ChildProcess | null = null
  let load: ChildProcess | null = null
  const gateways: Gateway[] = []
  let report: (() => void) | null = null
  let failure: unknown = null
  const cleanup: string[] = []
  try {
    const [versionRow] = await admin<{ server_version: string }[]>`show server_version`
    await admin.unsafe(`create database ${dbName}`)
    created = true
    console.error(`database ${dbName} created, Redis prefix ${redisPrefix} (both removed at the end)`)

    const up = await forkChild(SELF, 'upstream', ['upstream'], { detached: true, node: gatewayNode().path })
    upstream = up.child
    const upstreamUrl = `http://127.0.0.1:${up.port}`
    checkInterrupted()

    // Both gateways start together: migrations run under an advisory lock.
    const ports = await freePorts(4)
    for (const [i, name] of (['A', 'B'] as const).entries()) {
      const port = ports[2 * i]!
      const metricsPort = ports[2 * i + 1]!
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        HOST: '127.0.0.1',
        PORT: String(port),
        METRICS_PORT: String(metricsPort),
        DATABASE_URL: dbUrl.toString(),
        REDIS_URL,
        REDIS_KEY_PREFIX: redisPrefix,
        UPSTREAM_URL: upstreamUrl,
        LOG_LEVEL: 'warn',
        GATEWAY_CONFIG: resolve(ROOT, 'config/gateway.yaml'),
        SHUTDOWN_DELAY_MS: '0',
        SHUTDOWN_TIMEOUT_MS: '10000',
      }
      console.error(`starting gateway ${name} on :${port} (metrics :${metricsPort})…`)
      // Detached: a Ctrl-C at the terminal reaches this process only, which stops them in order.
      const child = spawn(gatewayNode().path, gatewayArgs('tsx', ROOT, null), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
      children.push(child)
      const base = `http://127.0.0.1:${port}`
      const g: Gateway = { name, base, url: new URL(base), metricsPort, child, agent: new http.Agent({ keepAlive: true, maxSockets: 8 }), logs: new Map(), lines: 0, tail: () => '' }
      watchOutput(g)
      gateways.push(g)
    }
    await Promise.all(gateways.map((g) => waitForGateway(g.base, g.child, g.tail, checkInterrupted)))
    const [A, B] = gateways as [Gateway, Gateway]
    const cliEnv = { ...process.env, DATABASE_URL: dbUrl.toString(), REDIS_URL, REDIS_KEY_PREFIX: redisPrefix }

    // Seed: the parent by the CLI; sub-accounts and their keys by the API, half through each.
    const seeded = JSON.parse(await runCli(['accounts', 'create', '--name', 'soak'], cliEnv)) as { account: { id: string }; api_key: string }
    const parent = { id: seeded.account.id, apiKey: seeded.api_key }
    const asParent = { authorization: `Bearer ${parent.apiKey}`, 'x-service-acting-tenant': 'self' }
    console.error(`seeding ${SUBS} sub-accounts with ${KEYS} keys each…`)
    const seedStarted = performance.now()
    const subs = await inParallel(
      Array.from({ length: SUBS }, (_, i) => i),
      4,
      async (i): Promise<SubInfo> => {
        checkInterrupted()
        const externalId = i % 3 === 2 ? null : `soak-${i}`
        const { body } = await api(
          gateways[i % 2]!,
          { method: 'POST', path: '/v1/sub-accounts', headers: asParent, body: JSON.stringify({ name: `soak ${i}`, ...(externalId === null ? {} : { external_id: externalId }) }) },
          201,
        )
        return { id: (JSON.parse(body) as { id: string }).id, externalId }
      },
    )
    const mint = async (g: Gateway, subId: string, label: string): Promise<KeyInfo> => {
      const { body } = await api(
        g,
        { method: 'POST', path: `/v1/sub-accounts/${subId}/api-keys`, headers: asParent, body: JSON.stringify({ name: label, scopes: SCOPES }) },
        201,
      )
      const minted = JSON.parse(body) as { id: string; api_key: string }
      return { id: minted.id, apiKey: minted.api_key, subId }
    }
    const keys = await inParallel(
      subs.flatMap((s) => Array.from({ length: KEYS }, (_, k) => ({ s, k }))),
      4,
      async ({ s, k }, i) => {
        checkInterrupted()
        return mint(gateways[i % 2]!, s.id, `soak key ${k}`)
      },
    )
    console.error(`seeded in ${((performance.now() - seedStarted) / 1000).toFixed(1)} s`)

    // Pre-flight: both instances proxy as the sub-account named.
    for (const g of gateways) {
      const sub = subs[0]!
      const answer = await send(g.agent, g.url, { method: 'GET', path: `${PROXY_PATH}/preflight`, headers: { authorization: `Bearer ${parent.apiKey}`, 'x-service-acting-tenant': sub.id } }, 5000)
      const outcome = proxiedOutcome(answer, sub.id, parent.id)
      if (outcome !== 'ok') throw new Error(`pre-flight on ${g.name}: ${outcome}: ${answer.body.slice(0, 300)}`)
    }

    // The model this process keeps, to choose changes.
    const subStatus = new Map(subs.map((s) => [s.id, 'active' as 'active' | 'deactivated']))
    const deactivatedAt = new Map<string, number>()
    const liveKeys = [...keys]

    // The load generator.
    const loader = await forkChild(SELF, 'load', ['load'], { detached: true })
    load = loader.child
    const loadChild = load
    let seq = 0
    const acks = new Map<number, () => void>()
    const progress = { completed: 0, errors: 0 }
    let loadResult: LoadResult | null = null
    const resultArrived = new Promise<LoadResult>((done, fail) => {
      loadChild.on('message', (message: FromLoad) => {
        if (message.type === 'ack') acks.get(message.seq)?.()
        else if (message.type === 'progress') Object.assign(progress, message)
        else if (message.type === 'result') {
          loadResult = message
          done(message)
        }
      })
      loadChild.once('exit', (code, signal) => {
        if (loadResult === null) fail(new Error(`the load generator exited (${signal ?? `status ${code}`}) before reporting`))
      })
    })
    resultArrived.catch(() => {})
    const toLoad = (message: ToLoad) => loadChild.send(message)
    const begin = (entities: string[]) =>
      new Promise<void>((done, fail) => {
        const mine = ++seq
        const timer = setTimeout(() => fail(new Error('the load generator did not acknowledge a change within 10 s')), 10_000)
        acks.set(mine, () => {
          clearTimeout(timer)
          acks.delete(mine)
          done()
        })
        toLoad({ type: 'begin', seq: mine, entities })
      })

    const plan: Plan = {
      instances: gateways.map((g) => ({ name: g.name, base: g.base })),
      parent,
      subs,
      keys,
      connections: CONNECTIONS,
      rate: RATE,
      timeoutMs: TIMEOUT_MS,
      graceMs: GRACE_MS,
      progressEveryMs: SAMPLE_S * 1000,
    }
    const before = await Promise.all(gateways.map((g) => scrape(g.metricsPort)))
    toLoad({ type: 'init', plan })
    const soakStart = performance.now()
    const deadline = soakStart + DURATION * 1000
    console.error(`soaking for ${DURATION} s: ${RATE > 0 ? `${RATE} req/s` : 'uncapped'} over ${CONNECTIONS} connections, alternating A/B, changes every ~${((WATCH_MS + CHANGE_GAP_MS / 2) / 1000).toFixed(1)} s…`)

    // Memory and progress, every SAMPLE_S.
    interface Sample {
      t: number
      rss: Record<'A' | 'B', number>
      heap: Record<'A' | 'B', number>
      lag: Record<'A' | 'B', number>
      reqPerSecond: number
      errors: number
    }
    const samples: Sample[] = []
    let lastCompleted = 0
    let lastSampleAt = soakStart
    const changes: Change[] = []
    const takeSample = async () => {
      const now = performance.now()
      const scraped = await Promise.all(gateways.map((g) => scrape(g.metricsPort)))
      const s: Sample = {
        t: (now - soakStart) / 1000,
        rss: { A: rssBytes(A.child.pid), B: rssBytes(B.child.pid) },
        heap: { A: metric(scraped[0], 'nodejs_heap_size_used_bytes'), B: metric(scraped[1], 'nodejs_heap_size_used_bytes') },
        lag: { A: metric(scraped[0], 'nodejs_eventloop_lag_p99_seconds'), B: metric(scraped[1], 'nodejs_eventloop_lag_p99_seconds') },
        reqPerSecond: ((progress.completed - lastCompleted) * 1000) / (now - lastSampleAt),
        errors: progress.errors,
      }
      lastCompleted = progress.completed
      lastSampleAt = now
      samples.push(s)
      const revokes = changes.filter((c) => c.kind === 'revoke')
      const slowest = Math.max(0, ...revokes.flatMap((c) => (['A', 'B'] as const).map((n) => c.results[n].key?.effectMs ?? 0)))
      const mb = (n: number) => (n / 2 ** 20).toFixed(0)
      console.error(
        `  t=${s.t.toFixed(0)}s  RSS A ${mb(s.rss.A)} MB, B ${mb(s.rss.B)} MB; heap A ${mb(s.heap.A)} MB, B ${mb(s.heap.B)} MB; ` +
          `${s.reqPerSecond.toFixed(0)} req/s; ${s.errors} errors; ${changes.length} changes (slowest revocation ${slowest.toFixed(0)} ms)`,
      )
    }
    // The first sample at once (the baseline), then every SAMPLE_S; the progress count lags by up to one interval.
    await takeSample()
    let sampling = Promise.resolve()
    const sampler = setInterval(() => {
      sampling = sampling.then(takeSample).catch((err) => console.error('sampling failed:', err))
    }, SAMPLE_S * 1000)

    // The change loop.
    let wake: () => void = () => {}
    onInterrupt = () => wake()
    const nap = (ms: number) =>
      new Promise<void>((done) => {
        const timer = setTimeout(done, ms)
        wake = () => {
          clearTimeout(timer)
          done()
        }
      })
    let nextIsRevoke = true
    const changeErrors: string[] = []
    while (!interrupted && performance.now() < deadline && alive(A.child) && alive(B.child)) {
      const now = performance.now()
      const oldest = [...deactivatedAt].sort((a, b) => a[1] - b[1])[0]
      let kind: ChangeKind
      if (oldest !== undefined && now - oldest[1] >= REACTIVATE_AFTER_S * 1000) kind = 'reactivate'
      else if (nextIsRevoke || deactivatedAt.size >= MAX_DEACTIVATED) kind = 'revoke'
      else kind = 'deactivate'
      if (kind !== 'reactivate') nextIsRevoke = !nextIsRevoke

      const ownKey = (subId: string) => liveKeys.find((k) => k.subId === subId) ?? null
      const keyProbe = (key: KeyInfo, want: string): Probe => ({
        name: 'own key',
        call: { method: 'GET', path: `${PROXY_PATH}/probe`, headers: { authorization: `Bearer ${key.apiKey}` } },
        tenant: key.subId,
        caller: key.subId,
        want,
      })
      const targetProbe = (subId: string, want: string): Probe => ({
        name: 'acting as uuid',
        call: { method: 'GET', path: `${PROXY_PATH}/probe`, headers: { authorization: `Bearer ${parent.apiKey}`, 'x-service-acting-tenant': subId } },
        tenant: subId,
        caller: parent.id,
        want,
      })

      let via: Gateway
      let call: Call
      let probes: Probe[]
      let old: Record<string, string>
      let entities: { id: string; status: EntityStatus }[]
      let what: string
      let key: KeyInfo | null = null
      let subId: string
      if (kind === 'revoke') {
        const candidates = liveKeys.filter((k) => subStatus.get(k.subId) === 'active')
        if (candidates.length === 0) throw new Error('no live key of an active sub-account left to revoke')
        key = candidates[Math.floor(Math.random() * candidates.length)]!
        subId = key.subId
        via = A
        call = { method: 'POST', path: `/v1/sub-accounts/${key.subId}/api-keys/${key.id}/revoke`, headers: asParent }
        probes = [{ ...keyProbe(key, UNAUTHENTICATED), name: 'key' }]
        old = { key: 'ok' }
        entities = [{ id: keyEntity(key.id), status: 'revoked' }]
        what = `key ${key.id}`
      } else if (kind === 'deactivate') {
        const candidates = subs.filter((s) => subStatus.get(s.id) === 'active')
        subId = candidates[Math.floor(Math.random() * candidates.length)]!.id
        via = B
        call = { method: 'POST', path: `/v1/sub-accounts/${subId}/deactivate`, headers: asParent }
        const own = ownKey(subId)
        probes = [targetProbe(subId, TARGET_DEACTIVATED), ...(own === null ? [] : [keyProbe(own, OWN_DEACTIVATED)])]
        old = { 'acting as uuid': 'ok', 'own key': 'ok' }
        entities = [{ id: subEntity(subId), status: 'deactivated' }]
        what = `sub-account ${subId}`
      } else {
        subId = oldest![0]
        via = A
        call = { method: 'POST', path: `/v1/sub-accounts/${subId}/reactivate`, headers: asParent }
        const own = ownKey(subId)
        probes = [targetProbe(subId, 'ok'), ...(own === null ? [] : [keyProbe(own, 'ok')])]
        old = { 'acting as uuid': TARGET_DEACTIVATED, 'own key': OWN_DEACTIVATED }
        entities = [{ id: subEntity(subId), status: 'active' }]
        what = `sub-account ${subId}`
      }

      const change: Change = { kind, via: via.name, at: (now - soakStart) / 1000, what, callMs: Number.NaN, results: { A: {}, B: {} } }
      await begin(entities.map((e) => e.id))
      let answer: Answer | null = null
      try {
        answer = await send(via.agent, via.url, call, 10_000)
      } catch (err) {
        change.error = `${kind} ${what} through ${via.name}: ${(err as Error).message}`
      }
      const t0 = performance.now()
      if (answer !== null) {
        change.callMs = answer.ms
        if (answer.status !== 200) change.error = `${kind} ${what} through ${via.name} answered ${answer.status}: ${answer.body.slice(0, 200)}`
      }
      if (change.error !== undefined) {
        // The change may or may not have committed: settle on what Postgres says.
        changeErrors.push(change.error)
        const sub = await send(A.agent, A.url, { method: 'GET', path: `/v1/sub-accounts/${subId}`, headers: { authorization: `Bearer ${parent.apiKey}` } }, 10_000).catch(() => null)
        const status = sub?.status === 200 ? ((JSON.parse(sub.body) as { status: 'active' | 'deactivated' }).status) : subStatus.get(subId)!
        if (kind === 'revoke') {
          const list = await send(A.agent, A.url, { method: 'GET', path: `/v1/sub-accounts/${subId}/api-keys?limit=100`, headers: { authorization: `Bearer ${parent.apiKey}` } }, 10_000).catch(() => null)
          const row = list?.status === 200 ? (JSON.parse(list.body) as { data: { id: string; status: EntityStatus }[] }).data.find((k) => k.id === key!.id) : undefined
          entities = [{ id: keyEntity(key!.id), status: row?.status ?? 'active' }]
        } else {
          entities = [{ id: subEntity(subId), status }]
        }
        toLoad({ type: 'settle', entities })
        changes.push(change)
      } else {
        // Settled for the load generator once both instances have seen the change.
        let seen = 0
        const onSeen = () => {
          if (++seen === 2) toLoad({ type: 'settle', entities })
        }
        const [ra, rb] = await Promise.all([watchInstance(A, probes, old, t0, onSeen), watchInstance(B, probes, old, t0, onSeen)])
        change.results = { A: ra, B: rb }
        changes.push(change)
      }
      // This process's model follows what the load generator was told.
      for (const e of entities) {
        if (e.id.startsWith('sub:')) {
          const status = e.status === 'active' ? 'active' : 'deactivated'
          subStatus.set(subId, status)
          if (status === 'deactivated') deactivatedAt.set(subId, deactivatedAt.get(subId) ?? performance.now())
          else deactivatedAt.delete(subId)
        } else if (e.status === 'revoked') {
          liveKeys.splice(liveKeys.indexOf(key!), 1)
        }
      }
      // A revoked key is replaced, through the other instance, so the pool does not run dry.
      if (kind === 'revoke' && entities[0]!.status === 'revoked') {
        try {
          const fresh = await mint(B, key!.subId, 'soak replacement')
          liveKeys.push(fresh)
          toLoad({ type: 'add-key', key: fresh })
        } catch (err) {
          changeErrors.push(`replacing ${what}: ${(err as Error).message}`)
        }
      }
      if (CHANGE_GAP_MS > 0) await nap(Math.random() * CHANGE_GAP_MS)
    }
    const soakSeconds = (performance.now() - soakStart) / 1000
    const crashed = gateways.filter((g) => !alive(g.child))

    toLoad({ type: 'stop' })
    const result = await resultArrived
    clearInterval(sampler)
    await sampling
    await takeSample()
    const after = await Promise.all(gateways.map((g) => scrape(g.metricsPort)))
    const pgVersion = versionRow?.server_version ?? 'unknown'

    report = () =>
      printReport({
        startedAt,
        loadAverage: [loadAverageBefore, os.loadavg()],
        pgVersion,
        redisPrefix,
        dbName,
        soakSeconds,
        subs,
        keyCount: keys.length,
        result,
        changes,
        changeErrors,
        samples,
        before,
        after,
        gateways,
        crashed: crashed.map((g) => g.name),
        cleanup,
      })
  } catch (err) {
    failure = err
    for (const g of gateways) {
      const tail = g.tail().trim()
      if (tail !== '') console.error(`gateway ${g.name} wrote (last 16 KiB):\n${tail}`)
    }
  } finally {
    // The load first, then the gateways (each must exit 0 on SIGTERM), the upstream, the store.
    await stopChild(load, 5_000).catch((err) => console.error('stopping the load generator:', err))
    await Promise.all(
      gateways.map(async (g) => {
        if (!alive(g.child)) {
          g.exit = { code: g.child.exitCode, signal: g.child.signalCode, ms: 0 }
          return
        }
        const started = performance.now()
        const exited = new Promise<void>((done) => g.child.once('exit', () => done()))
        g.child.kill('SIGTERM')
        const timer = setTimeout(() => g.child.kill('SIGKILL'), 30_000)
        await exited
        clearTimeout(timer)
        g.exit = { code: g.child.exitCode, signal: g.child.signalCode, ms: performance.now() - started }
        g.agent.destroy()
      }),
    ).catch((err) => console.error('stopping the gateways:', err))
    await stopChild(upstream, 5_000).catch((err) => console.error('stopping the upstream:', err))
    if (created) {
      await admin.unsafe(`drop database if exists ${dbName} with (force)`).then(
        () => cleanup.push(`database ${dbName} dropped`),
        (err) => {
          cleanup.push(`dropping ${dbName} FAILED; drop it by hand`)
          console.error(`dropping ${dbName} failed; drop it by hand:`, err)
        },
      )
    }
    await admin.end({ timeout: 5 })
    await deleteRedisKeys(redisPrefix).then(
      (n) => cleanup.push(`${n} Redis keys ${redisPrefix}* deleted`),
      (err) => {
        cleanup.push(`deleting Redis keys ${redisPrefix}* FAILED`)
        console.error(`deleting the Redis keys ${redisPrefix}* failed:`, err)
      },
    )
  }
  if (failure !== null) throw failure
  report?.()
}

async function deleteRedisKeys(prefix: string): Promise<number> {
  const redis = new Redis(REDIS_URL, { protocol: 2, maxRetriesPerRequest: 1, connectTimeout: 2000, retryStrategy: () => null })
  redis.on('error', () => {})
  try {
    let deleted = 0
    let cursor = '0'
    do {
      const [next, found] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
      cursor = next
      if (found.length > 0) deleted += await redis.del(...found)
    } while (cursor !== '0')
    return deleted
  } finally {
    redis.disconnect()
  }
}

// ---------------------------------------------------------------------------------------------
// The report.

interface ReportInput {
  startedAt: Date
  loadAverage: [number[], number[]]
  pgVersion: string
  redisPrefix: string
  dbName: string
  soakSeconds: number
  subs: SubInfo[]
  keyCount: number
  result: LoadResult
  changes: Change[]
  changeErrors: string[]
  samples: { t: number; rss: Record<'A' | 'B', number>; heap: Record<'A' | 'B', number>; lag: Record<'A' | 'B', number>; reqPerSecond: number; errors: number }[]
  before: (Scrape | null)[]
  after: (Scrape | null)[]
  gateways: Gateway[]
  crashed: string[]
  cleanup: string[]
}

function table(header: string[], rows: string[][], leftColumns = 1): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)))
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i < leftColumns ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd()
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)]
}

const ms = (n: number | null | undefined) => (n === null || n === undefined || Number.isNaN(n) ? '-' : n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0))
const mib = (n: number) => (Number.isNaN(n) ? '-' : (n / 2 ** 20).toFixed(1))
const counts = (record: Record<string, number>) =>
  Object.entries(record)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ×${fmt(v)}`)
    .join(', ')

function command(): string {
  const env = [`SOAK_DURATION=${DURATION}`]
  for (const name of Object.keys(process.env).sort()) {
    if (name.startsWith('SOAK_') && name !== 'SOAK_DURATION') env.push(`${name}=${process.env[name]}`)
  }
  for (const name of ['BENCH_DATABASE_URL', 'BENCH_REDIS_URL']) {
    const value = envForCommand(name)
    if (value !== null) env.push(value)
  }
  return `${env.join(' ')} npx tsx bench/soak.ts`
}

let chosenNode: ServerNode | null = null
/** The gateways' and the upstream's node: the image's, as in bench/proxy.ts (BENCH_NODE, bench/lib.ts). */
function gatewayNode(): ServerNode {
  return (chosenNode ??= serverNode())
}

function printReport(r: ReportInput): void {
  const cpus = os.cpus()
  const out: string[] = []
  const say = (line = '') => out.push(line)
  const loads = r.loadAverage.map((l) => l.map((x) => x.toFixed(2)).join(' '))
  say(`date      ${r.startedAt.toISOString()} (start)`)
  say(`machine   ${cpus[0]?.model.trim() ?? 'unknown cpu'}, ${cpus.length} cores, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, ${os.platform()} ${os.release()}; load average ${loads[0]} at the start, ${loads[1]} at the end`)
  say(`          (a shared VM: the load generator, both gateways, the upstream, Postgres and Redis all run on it, beside other work)`)
  say(`node      gateways and upstream on ${gatewayNode().version} (${gatewayNode().reason}), this process and the load generator on ${process.version}; fastify ${packageVersion('fastify')}, ioredis ${packageVersion('ioredis')}, postgres.js ${packageVersion('postgres')}; Postgres ${r.pgVersion}`)
  say(`command   ${command()}`)
  say(`gateways  A and B: node --import tsx src/main.ts at ${gitDescription()}, LOG_LEVEL=warn, one database (${r.dbName}), Redis prefix ${r.redisPrefix}`)
  say(`seed      1 parent (CLI), ${r.subs.length} sub-accounts (${r.subs.filter((s) => s.externalId !== null).length} with external_id), ${r.keyCount} sub-account keys (API)`)
  const total = r.result.kinds.reduce((sum, k) => sum + k.count, 0)
  say(
    `load      ${r.soakSeconds.toFixed(1)} s (planned ${DURATION} s), ${fmt(total)} requests = ${fmt(total / r.result.seconds)} req/s ` +
      `(cap ${RATE > 0 ? RATE : 'none'}), ${CONNECTIONS} concurrent, alternating A/B, per-request timeout ${TIMEOUT_MS} ms`,
  )
  say(`changes   one at a time: revoke a key through A, deactivate a sub-account through B (at most ${MAX_DEACTIVATED} at once), reactivate it through A after ≥ ${REACTIVATE_AFTER_S} s;`)
  say(`          each watched on A and B for ${WATCH_MS} ms after its call answered, probes every ${PROBE_INTERVAL_MS} ms, then a pause of 0–${CHANGE_GAP_MS} ms`)
  if (r.crashed.length > 0) say(`!!        gateway ${r.crashed.join(' and ')} exited DURING the soak`)
  say()

  // Requests.
  say('requests (latency in ms, client side, answered requests only)')
  const errorTotals: Record<string, number> = {}
  const rows = r.result.kinds.map((k) => {
    const errors = Object.values(k.errors).reduce((a, b) => a + b, 0)
    for (const [type, n] of Object.entries(k.errors)) errorTotals[type] = (errorTotals[type] ?? 0) + n
    return [k.kind, fmt(k.count), fmt(k.expected), counts(k.duringChange) || '-', errors === 0 ? '0' : `${fmt(errors)} (${counts(k.errors)})`, ms(k.p50), ms(k.p99), ms(k.max)]
  })
  for (const line of table(['kind', 'count', 'as expected', 'overlapping a change (by answer)', 'errors', 'p50', 'p99', 'max'], rows, 1)) say(line)
  for (const i of r.result.instances) say(`instance ${i.name}: ${fmt(i.count)} requests, ${fmt(i.errors)} errors, p50 ${ms(i.p50)} ms, p99 ${ms(i.p99)} ms`)
  const errorCount = Object.values(errorTotals).reduce((a, b) => a + b, 0)
  say(`errors    ${errorCount === 0 ? 'none' : `${fmt(errorCount)}: ${counts(errorTotals)}`}`)
  for (const sample of r.result.errorSamples.slice(0, 15)) say(`          ${sample}`)
  if (r.result.errorSamples.length > 15) say(`          … (${errorCount - 15} more)`)
  say()

  // Propagation.
  say('propagation: ms from the change call\'s answer to the answer of the first probe that saw the change')
  say(`(an upper bound: it includes that probe's round-trip. "old until": the latest any probe that still got the old answer was sent, max over the changes;`)
  say(` "old seen": in how many changes any probe got the old answer. "not seen" = not within ${EFFECT_TIMEOUT_MS} ms; a flap = the old answer again after the new one)`)
  const probeRows: string[][] = []
  const kinds: [ChangeKind, string][] = [
    ['revoke', 'key'],
    ['deactivate', 'acting as uuid'],
    ['deactivate', 'own key'],
    ['reactivate', 'acting as uuid'],
    ['reactivate', 'own key'],
  ]
  for (const [kind, probe] of kinds) {
    const mine = r.changes.filter((c) => c.kind === kind && c.error === undefined)
    for (const name of ['A', 'B'] as const) {
      const results = mine.map((c) => c.results[name][probe]).filter((x): x is ProbeResult => x !== undefined)
      if (results.length === 0) continue
      const times = Float64Array.from(results.filter((x) => x.effectMs !== null).map((x) => x.effectMs!)).sort()
      const notSeen = results.filter((x) => x.effectMs === null).length
      const flaps = results.reduce((sum, x) => sum + x.flaps, 0)
      const olds = results.filter((x) => x.oldUntilMs !== null).map((x) => x.oldUntilMs!)
      const anomalies: Record<string, number> = {}
      for (const x of results) for (const [k, v] of Object.entries(x.anomalies)) anomalies[k] = (anomalies[k] ?? 0) + v
      const via = mine[0]!.via
      probeRows.push([
        kind,
        probe,
        `${name}${name === via ? ' (the one called)' : ''}`,
        fmt(results.length),
        times.length === 0 ? '-' : ms(percentile(times, 0.5)),
        times.length === 0 ? '-' : ms(percentile(times, 0.99)),
        times.length === 0 ? '-' : ms(times[times.length - 1]!),
        String(olds.length),
        olds.length === 0 ? '-' : ms(Math.max(...olds)),
        String(notSeen),
        String(flaps),
        counts(anomalies) || '-',
      ])
    }
  }
  for (const line of table(['change', 'probe', 'instance', 'n', 'p50', 'p99', 'max', 'old seen', 'old until', 'not seen', 'flaps', 'other answers'], probeRows, 3)) say(line)
  const callTimes = (kind: ChangeKind) => Float64Array.from(r.changes.filter((c) => c.kind === kind && !Number.isNaN(c.callMs)).map((c) => c.callMs)).sort()
  say(
    `calls     ` +
      (['revoke', 'deactivate', 'reactivate'] as const)
        .map((kind) => {
          const t = callTimes(kind)
          return t.length === 0 ? `${kind}: none` : `${kind} ×${t.length} p50 ${ms(percentile(t, 0.5))} ms, max ${ms(t[t.length - 1]!)} ms`
        })
        .join('; '),
  )
  if (r.changeErrors.length > 0) for (const e of r.changeErrors) say(`!! change ${e}`)
  // The headline: the slowest revocation, over both instances.
  let slowest: { ms: number; oldUntil: number | null; change: Change; on: 'A' | 'B' } | null = null
  let revocationsSeen: number[] = []
  let unseen = 0
  for (const c of r.changes.filter((x) => x.kind === 'revoke' && x.error === undefined)) {
    const each = (['A', 'B'] as const).map((n) => c.results[n].key?.effectMs ?? null)
    if (each.some((x) => x === null)) {
      unseen++
      continue
    }
    const worst = Math.max(...(each as number[]))
    revocationsSeen.push(worst)
    if (slowest === null || worst > slowest.ms) {
      const on = each[0]! >= each[1]! ? 'A' : 'B'
      slowest = { ms: worst, oldUntil: c.results[on].key!.oldUntilMs, change: c, on }
    }
  }
  revocationsSeen = revocationsSeen.sort((a, b) => a - b)
  if (slowest === null) {
    say(`SLOWEST REVOCATION: none measured${unseen > 0 ? ` (${unseen} never seen on both instances within ${EFFECT_TIMEOUT_MS} ms)` : ''}`)
  } else {
    const p99 = percentile(revocationsSeen, 0.99)
    say(
      `SLOWEST REVOCATION to take effect on both instances: ${ms(slowest.ms)} ms (on ${slowest.on}, ${slowest.change.what}, at t=${slowest.change.at.toFixed(0)} s; ` +
        `${slowest.oldUntil === null ? 'already refused by the first probe, so this is that probe\'s round-trip' : `a probe sent at ${ms(slowest.oldUntil)} ms still got through`}); ` +
        `over ${revocationsSeen.length} revocations p50 ${ms(percentile(revocationsSeen, 0.5))} ms, p99 ${ms(p99)} ms ` +
        `(DESIGN §8 target ≤ 1000 ms p99: ${p99 <= 1000 && unseen === 0 ? 'met' : 'NOT MET'})${unseen > 0 ? `; ${unseen} NOT SEEN within ${EFFECT_TIMEOUT_MS} ms` : ''}`,
    )
  }
  say()

  // Memory.
  say(`memory    every ${SAMPLE_S} s: RSS from /proc/<pid>/status, heap used and event-loop lag p99 from /metrics; req/s of the load in the interval before`)
  let every = 1
  while (r.samples.length / every > 40) every++
  const shown = r.samples.filter((_, i) => i % every === 0 || i === r.samples.length - 1)
  const memRows = shown.map((s) => [
    s.t.toFixed(0),
    mib(s.rss.A),
    mib(s.heap.A),
    ms(s.lag.A * 1000),
    mib(s.rss.B),
    mib(s.heap.B),
    ms(s.lag.B * 1000),
    s.t === 0 ? '-' : fmt(s.reqPerSecond),
    fmt(s.errors),
  ])
  for (const line of table(['t s', 'A RSS MiB', 'A heap MiB', 'A lag ms', 'B RSS MiB', 'B heap MiB', 'B lag ms', 'req/s', 'errors so far'], memRows, 0)) say(line)
  if (every > 1) say(`(one sample in ${every} shown, and the last; the series below hold them all)`)
  const spark = (values: number[]) => {
    const bars = '▁▂▃▄▅▆▇█'
    const finite = values.filter((v) => !Number.isNaN(v))
    const lo = Math.min(...finite)
    const hi = Math.max(...finite)
    return values.map((v) => (Number.isNaN(v) ? ' ' : bars[hi === lo ? 0 : Math.round(((v - lo) / (hi - lo)) * 7)])).join('')
  }
  const end = r.samples[r.samples.length - 1]?.t ?? 0
  const firstMinute = r.samples.filter((s) => s.t <= 60)
  const lastMinute = r.samples.filter((s) => s.t >= end - 60)
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
  for (const name of ['A', 'B'] as const) {
    const rss = r.samples.map((s) => s.rss[name])
    const heap = r.samples.map((s) => s.heap[name])
    const f = mean(firstMinute.map((s) => s.rss[name]))
    const l = mean(lastMinute.map((s) => s.rss[name]))
    const fh = mean(firstMinute.map((s) => s.heap[name]))
    const lh = mean(lastMinute.map((s) => s.heap[name]))
    say(
      `${name} RSS  ${spark(rss)}  ${mib(Math.min(...rss))}–${mib(Math.max(...rss))} MiB; first-minute mean ${mib(f)} → last-minute mean ${mib(l)} MiB ` +
        `(${l >= f ? '+' : ''}${mib(l - f)} MiB, ${(((l - f) / f) * 100).toFixed(1)}%)`,
    )
    say(`${name} heap ${spark(heap)}  ${mib(Math.min(...heap))}–${mib(Math.max(...heap))} MiB; first-minute mean ${mib(fh)} → last-minute mean ${mib(lh)} MiB`)
  }
  if (end < 120) say(`(a run shorter than two minutes: the first and the last minute overlap)`)
  say()

  // Store and cache counters.
  say('counters  deltas over the soak (seed excluded), from each gateway\'s /metrics')
  const delta = (i: number, name: string, ...labels: string[]) => metric(r.after[i], name, ...labels) - metric(r.before[i], name, ...labels)
  const counterRows: [string, string, string[]][] = [
    ['store lookups answered by Postgres', 'tgw_store_lookups_total', ['tier="postgres"']],
    ['store lookups answered by Redis', 'tgw_store_lookups_total', ['tier="redis"']],
    ['background refreshes (among those lookups)', 'tgw_cache_refreshes_total', []],
    ['cache hits, in-process', 'tgw_cache_hits_total', ['tier="local"']],
    ['cache misses, in-process', 'tgw_cache_misses_total', ['tier="local"']],
    ['cache misses, Redis', 'tgw_cache_misses_total', ['tier="redis"']],
    ['invalidations received', 'tgw_cache_invalidations_received_total', []],
    ['Redis errors', 'tgw_redis_errors_total', []],
    ['usage flush failures', 'tgw_usage_flush_failures_total', []],
    ['proxied requests', 'tgw_proxied_requests_total', []],
    ['requests proxy 2xx', 'tgw_http_requests_total', ['kind="proxy"', 'status_class="2xx"']],
    ['requests proxy 4xx', 'tgw_http_requests_total', ['kind="proxy"', 'status_class="4xx"']],
    ['requests management 2xx', 'tgw_http_requests_total', ['kind="management"', 'status_class="2xx"']],
    ['requests management 4xx', 'tgw_http_requests_total', ['kind="management"', 'status_class="4xx"']],
    ['requests 5xx (any kind)', 'tgw_http_requests_total', ['status_class="5xx"']],
  ]
  const cRows = counterRows.map(([label, name, labels]) => [label, ...[0, 1].map((i) => (Number.isNaN(delta(i, name, ...labels)) ? 'n/a' : fmt(delta(i, name, ...labels))))])
  for (const line of table(['counter', 'A', 'B'], cRows, 1)) say(line)
  const unknownKeys = r.result.kinds.find((k) => k.kind === 'bad: unknown key')?.count ?? 0
  say(`(every "unknown key" request carries a fresh key, so each costs a Postgres lookup: ${fmt(unknownKeys)} sent over both;`)
  say(` every change evicts its entries on both instances, and the next request refills them)`)
  say()

  // Logs and shutdown.
  for (const g of r.gateways) {
    const lines = [...g.logs].sort((a, b) => b[1].count - a[1].count)
    say(`gateway ${g.name} log: ${fmt(g.lines)} lines; ${lines.length === 0 ? 'none at warn or above' : `at warn or above, by message:`}`)
    for (const [msg, { count, example }] of lines.slice(0, 10)) {
      say(`  ×${fmt(count)} ${msg}`)
      say(`      e.g. ${example.slice(0, 300)}`)
    }
  }
  for (const g of r.gateways) {
    const e = g.exit
    say(`shutdown  ${g.name}: ${e === undefined ? 'unknown' : `${e.signal !== null ? `killed by ${e.signal}` : `exit status ${e.code}`} ${e.ms > 0 ? `${ms(e.ms)} ms after SIGTERM` : '(had already exited)'}`}${e?.code === 0 ? '' : '  !!'}`)
  }
  say(`cleanup   ${r.cleanup.join('; ')}`)

  const notSeen = r.changes.filter((c) => (['A', 'B'] as const).some((n) => Object.values(c.results[n]).some((x) => x.effectMs === null))).length
  const flaps = r.changes.reduce((sum, c) => sum + (['A', 'B'] as const).reduce((s, n) => s + Object.values(c.results[n]).reduce((f, x) => f + x.flaps, 0), 0), 0)
  const badExit = r.gateways.filter((g) => g.exit?.code !== 0).length
  const problems = [
    errorCount > 0 ? `${fmt(errorCount)} request errors` : '',
    notSeen > 0 ? `${notSeen} changes not seen in time` : '',
    flaps > 0 ? `${flaps} flaps` : '',
    r.changeErrors.length > 0 ? `${r.changeErrors.length} failed change calls` : '',
    badExit > 0 ? `${badExit} gateways did not exit 0` : '',
    r.crashed.length > 0 ? 'a gateway died during the soak' : '',
    interrupted ? 'interrupted' : '',
  ].filter((p) => p !== '')
  say(`verdict   ${problems.length === 0 ? 'PASS' : `FAIL: ${problems.join(', ')}`}`)
  console.log(out.join('\n'))
  if (problems.length > 0) process.exitCode = 1
}

const role = process.argv[2]
if (role === 'upstream') {
  await runUpstream()
} else if (role === 'load') {
  // Stays up (the IPC channel) until this bench sends SIGTERM or goes away: an exit now could
  // drop the result message on its way.
  await runLoad()
} else {
  onSignals()
  await main().then(
    () => {
      process.exitCode ??= 0
    },
    (err: unknown) => {
      console.error('soak failed:', err instanceof Error && err.message === 'interrupted' ? 'interrupted' : err)
      process.exitCode = 1
    },
  )
}
