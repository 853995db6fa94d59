// Webhook throughput and lag: two gateway replicas (processes, as the image runs them) on one
// database and one Redis prefix, one endpoint of one parent pointed at bench/servers.js receiver
// (its own process, 204 to everything, verifying nothing). Three loads of events: sub-account
// creations at a steady rate, a burst of them as fast as the API takes them, and a backlog
// committed in one transaction; for each, how fast the two replicas delivered, the lag of each
// event from its commit to its arrival, how the attempts were shared, and whether each event
// arrived exactly once. bench/README.md says what it starts, what it prints and its knobs.
import http from 'node:http'
import { performance } from 'node:perf_hooks'
import postgres from 'postgres'
import { eventId } from '../src/events/ulid.js'
import { type EventRow, insertEvent } from '../src/store/events.js'
import {
  checkInterrupted,
  createDatabase,
  deleteRedisPrefix,
  envInt,
  fmt,
  type Gateway,
  gitDescription,
  isInterrupted,
  metric,
  percentile,
  REDIS_URL,
  type Received,
  reportHead,
  request,
  run,
  runCli,
  type Scrape,
  type Server,
  scrape,
  sleep,
  startGateway,
  startReceiver,
  stopChild,
  table,
} from './lib.js'

const EVENTS = envInt('BENCH_EVENTS', 2000)
const RATE = envInt('BENCH_RATE', 100)
const BURST_CONCURRENCY = envInt('BENCH_BURST_CONCURRENCY', 16)
const BACKLOG = envInt('BENCH_BACKLOG', 5000, 0)
/** How long to wait for the last deliveries once no more arrive. */
const QUIET_MS = 15_000

/** Wall-clock ms since the epoch, to a fraction: comparable with the receiver's and Postgres's clocks. */
const wallNow = () => performance.timeOrigin + performance.now()

interface Phase {
  name: string
  load: string
  events: number
  /** Seconds from the first commit to the last (the backlog: its transaction's). */
  writeSeconds: number
  /** Events delivered per second: the events over the first commit to the last arrival. */
  deliveredPerSecond: number
  /** Each event's arrival after its commit, ms, sorted. */
  lagFromCommit: number[]
  /** Each event's arrival after its POST's 201 came back, ms, sorted; null for the backlog. */
  lagFromAnswer: number[] | null
  /** Repeated arrivals, events that never arrived, and arrivals of no event of this load. */
  duplicates: number
  missing: number
  strangers: number
  /** Per replica: attempts by outcome over the phase. */
  split: { succeeded: number; other: number }[]
}

async function main(): Promise<void> {
  const db = await createDatabase('webhooks')
  const prefix = `tgwwh:${db.name}:`
  const started: Server[] = []
  const sql = postgres(db.url, { max: 4, onnotice: () => {} })
  try {
    const receiver = await startReceiver()
    started.push(receiver)
    const env = { WEBHOOKS_ALLOW_INSECURE: 'true', REDIS_KEY_PREFIX: prefix }
    const replicas: Gateway[] = []
    for (let i = 0; i < 2; i++) {
      replicas.push(await startGateway({ databaseUrl: db.url, upstreamUrl: 'http://127.0.0.1:9', env }))
      started.push(replicas.at(-1)!)
    }
    const parent = JSON.parse(
      await runCli(['accounts', 'create', '--name', 'bench'], { DATABASE_URL: db.url, REDIS_URL }),
    ) as { account: { id: string }; api_key: string }
    const headers = { authorization: `Bearer ${parent.api_key}`, 'x-service-acting-tenant': 'self' }
    const agents = replicas.map(() => new http.Agent({ keepAlive: true, maxSockets: BURST_CONCURRENCY }))
    const post = (k: number, body: object, path = '/v1/sub-accounts') =>
      request(agents[k % 2]!, new URL(replicas[k % 2]!.url), {
        method: 'POST',
        path,
        headers,
        body: JSON.stringify(body),
      })
    const endpoint = await post(
      0,
      { url: `${receiver.url}/hook`, event_types: ['sub_account.*', 'api_key.*'] },
      '/v1/sub-accounts/webhook-endpoints',
    )
    if (endpoint.status !== 201)
      throw new Error(`POST …/webhook-endpoints answered ${endpoint.status}: ${endpoint.body}`)

    let serial = 0
    /** One creation through replica k; its sub-account id and when its 201 came back. */
    const create = async (k: number): Promise<[string, number]> => {
      const n = ++serial
      for (let attempt = 0; ; attempt++) {
        const answer = await post(k, { name: `bench ${n}` })
        // A Redis prefix never seen refuses the management rate's leases for 3 s (the first calls only).
        if (answer.status === 429 && attempt < 10) {
          await sleep(1000)
          continue
        }
        if (answer.status !== 201) throw new Error(`POST /v1/sub-accounts answered ${answer.status}: ${answer.body}`)
        return [(JSON.parse(answer.body) as { id: string }).id, wallNow()]
      }
    }
    // Pre-flight: one event through each replica arrives.
    for (const k of [0, 1]) await create(k)
    let seen = 0
    /** What the receiver got from now until every one of `ids` arrived, or nothing more came for QUIET_MS. */
    const waitFor = async (ids: Set<string>): Promise<Received['received']> => {
      const got: Received['received'] = []
      const waiting = new Set(ids)
      let last = performance.now()
      while (waiting.size > 0 && performance.now() - last < QUIET_MS) {
        checkInterrupted()
        await sleep(50)
        const batch = await receiver.received(seen)
        if (batch.received.length > 0) last = performance.now()
        for (const entry of batch.received) waiting.delete(entry[0])
        got.push(...batch.received)
        seen += batch.received.length
      }
      return got
    }
    const firsts = await sql<{ id: string }[]>`select id from events where type = 'sub_account.created'`
    if (firsts.length !== 2) throw new Error(`the pre-flight's two creations wrote ${firsts.length} events`)
    await waitFor(new Set(firsts.map((e) => e.id)))

    const phases: Phase[] = []
    /** A load's writes: each sub-account's 201 time, or the one commit's time (ms since the epoch). */
    type Written = { answers: Map<string, number> } | { startedAt: number; committedAt: number }
    const runPhase = async (name: string, loadText: string, write: () => Promise<Written>) => {
      checkInterrupted()
      console.error(`${name}: ${loadText}…`)
      const [{ seq }] = await sql<[{ seq: string }]>`select coalesce(max(seq), 0)::text as seq from events`
      const before = await Promise.all(replicas.map((r) => scrape(r.metricsPort)))
      const written = await write()
      const events = await sql<{ id: string; created: number; target: string }[]>`
        select id, extract(epoch from created_at) * 1000 as created, target ->> 'id' as target
        from events where seq > ${seq} and type like 'sub_account.%' order by seq`
      const got = await waitFor(new Set(events.map((e) => e.id)))
      // Attempts are counted once recorded, a moment after the receiver's answer.
      await sleep(1500)
      const after = await Promise.all(replicas.map((r) => scrape(r.metricsPort)))
      phases.push(summarize(name, loadText, events, got, written, before, after))
      const p = phases.at(-1)!
      console.error(
        `  ${fmt(p.events)} events, ${fmt(p.deliveredPerSecond)} delivered/s, lag p50 ${p.lagFromCommit.length ? percentile(p.lagFromCommit, 0.5).toFixed(1) : '-'} ms; ${p.missing} missing, ${p.duplicates} repeated`,
      )
    }

    await runPhase('steady', `${fmt(EVENTS)} creations at ${RATE}/s, alternating replicas, open loop`, async () => {
      const answers = new Map<string, number>()
      const start = performance.now()
      const pending: Promise<void>[] = []
      for (let k = 0; k < EVENTS && !isInterrupted(); k++) {
        const due = start + (k * 1000) / RATE
        const wait = due - performance.now()
        if (wait > 0) await sleep(wait)
        pending.push(create(k).then(([id, at]) => void answers.set(id, at)))
      }
      await Promise.all(pending)
      return { answers }
    })
    await runPhase(
      'burst',
      `${fmt(EVENTS)} creations, ${BURST_CONCURRENCY} in flight, alternating replicas`,
      async () => {
        const answers = new Map<string, number>()
        let next = 0
        const loop = async () => {
          while (next < EVENTS && !isInterrupted()) {
            const [id, at] = await create(next++)
            answers.set(id, at)
          }
        }
        await Promise.all(Array.from({ length: BURST_CONCURRENCY }, loop))
        return { answers }
      },
    )
    if (BACKLOG > 0)
      await runPhase('backlog', `${fmt(BACKLOG)} events committed in one transaction (insertEvent)`, async () => {
        const startedAt = wallNow()
        const subs = await sql<
          { id: string }[]
        >`select id from tenants where parent_id = ${parent.account.id} limit 100`
        await sql.begin(async (tx) => {
          for (let i = 0; i < BACKLOG; i++) {
            const sub = subs[i % subs.length]!.id
            const event: Omit<EventRow, 'created_at'> = {
              id: eventId(),
              account_id: parent.account.id,
              type: 'sub_account.updated',
              actor: { type: 'operator', key_id: null },
              target: { type: 'sub_account', id: sub },
              request_id: null,
              source_ip: null,
              data: { object: { id: sub, name: `backlog ${i}` }, previous: { name: 'before' } },
            }
            await insertEvent(tx, event)
          }
        })
        return { startedAt, committedAt: wallNow() }
      })
    report(phases, replicas, gitDescription())
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    await sql.end()
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await deleteRedisPrefix(prefix)
    await db.drop()
  }
}

function summarize(
  name: string,
  loadText: string,
  events: { id: string; created: number; target: string }[],
  got: Received['received'],
  written: { answers: Map<string, number> } | { startedAt: number; committedAt: number },
  before: (Scrape | null)[],
  after: (Scrape | null)[],
): Phase {
  const arrivals = new Map<string, number[]>()
  for (const [id, at] of got) arrivals.set(id, [...(arrivals.get(id) ?? []), at])
  // One transaction's events all carry its start as created_at: their lag runs from its commit.
  const answers = 'answers' in written ? written.answers : null
  const created = events.map((e) => ('committedAt' in written ? written.committedAt : Number(e.created)))
  const ids = new Set(events.map((e) => e.id))
  const lagFromCommit: number[] = []
  const lagFromAnswer: number[] = []
  let [duplicates, missing, lastArrival] = [0, 0, 0]
  for (const [i, event] of events.entries()) {
    const times = arrivals.get(event.id)
    if (times === undefined) {
      missing++
      continue
    }
    duplicates += times.length - 1
    const first = Math.min(...times)
    lastArrival = Math.max(lastArrival, ...times)
    lagFromCommit.push(first - created[i]!)
    const answered = answers?.get(event.target)
    if (answered !== undefined) lagFromAnswer.push(first - answered)
  }
  const strangers = [...arrivals.keys()].filter((id) => !ids.has(id)).length
  const delta = (k: number, ...labels: string[]) =>
    metric(after[k], 'tgw_webhook_deliveries_total', ...labels) -
    metric(before[k], 'tgw_webhook_deliveries_total', ...labels)
  const firstCommit = Math.min(...created)
  return {
    name,
    load: loadText,
    events: events.length,
    writeSeconds:
      ('startedAt' in written ? written.committedAt - written.startedAt : Math.max(...created) - firstCommit) / 1000,
    deliveredPerSecond: (events.length - missing) / ((lastArrival - firstCommit) / 1000),
    lagFromCommit: lagFromCommit.sort((a, b) => a - b),
    lagFromAnswer: answers === null ? null : lagFromAnswer.sort((a, b) => a - b),
    duplicates,
    missing,
    strangers,
    split: [0, 1].map((k) => ({
      succeeded: delta(k, 'outcome="succeeded"'),
      other: delta(k) - delta(k, 'outcome="succeeded"'),
    })),
  }
}

function report(phases: Phase[], replicas: Gateway[], code: string): void {
  const lag = (values: number[] | null) =>
    values === null || values.length === 0
      ? ['-', '-', '-']
      : [percentile(values, 0.5), percentile(values, 0.99), values.at(-1)!].map((v) => v.toFixed(1))
  const lines = [
    ...reportHead('bench:webhooks'),
    `replicas  two gateway processes at ${code} on one database and Redis prefix (${replicas[0]!.command}), WEBHOOKS_ALLOW_INSECURE=true, the worker's defaults (128 attempts at once per replica, 16 per endpoint, 32 per parent)`,
    `receiver  node bench/servers.js receiver: 204 to every POST, verifying nothing; one endpoint subscribed to sub_account.* and api_key.*`,
    ...phases.map((p) => `${p.name.padEnd(9)} ${p.load}`),
    '',
    ...table(
      [
        'load',
        'events',
        'written in s',
        'delivered/s',
        'lag from commit p50 / p99 / max ms',
        'from the 201 p50 / p99 / max ms',
        'attempts A / B',
        'other outcomes',
        'missing',
        'repeated',
      ],
      phases.map((p) => [
        p.name,
        fmt(p.events),
        p.writeSeconds.toFixed(1),
        fmt(p.deliveredPerSecond),
        lag(p.lagFromCommit).join(' / '),
        lag(p.lagFromAnswer).join(' / '),
        p.split.map((s) => fmt(s.succeeded)).join(' / '),
        fmt(p.split.reduce((sum, s) => sum + s.other, 0)),
        fmt(p.missing),
        fmt(p.duplicates),
      ]),
    ),
    '(commit: the event\'s created_at, Postgres\'s now() in its transaction, a little before the commit itself; arrival: when the receiver had the headers; delivered/s: the events over the first commit to the last arrival; attempts: tgw_webhook_deliveries_total{outcome="succeeded"} of each replica over the load)',
  ]
  const strangers = phases.reduce((sum, p) => sum + p.strangers, 0)
  if (strangers > 0) lines.push(`${strangers} webhook-ids arrived that name no event of their load`)
  console.log(lines.join('\n'))
}

run(main)
