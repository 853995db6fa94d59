// Importing keys from elsewhere (docs/key-imports.md) at scale: one gateway on real Postgres and
// Redis, a parent with BENCH_SUB_ACCOUNTS sub-accounts (by external id), and BENCH_KEYS foreign
// keys (`sk_live_` + 32 base64url characters; every tenth given by its SHA-256 only) imported in
// one POST /v1/sub-accounts/api-keys/imports. It reports the import's seconds and lines a second,
// and what it cost Postgres: the bench database's committed transactions and inserted rows
// (pg_stat_database deltas; every statement the gateway sends outside a transaction is one), and
// the import's statements as the code sends them (three a batch of 500 lines). Then a sample of
// BENCH_SAMPLE imported keys, each new to the gateway, authenticates on a proxied route.
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import http from 'node:http'
import { performance } from 'node:perf_hooks'
import postgres from 'postgres'
import { createParentWithKey } from '../src/auth/mint.js'
import { IMPORT_BATCH_LINES } from '../src/auth/key-imports.js'
import {
  counts,
  createDatabase,
  deleteRedisPrefix,
  envInt,
  fmt,
  ms,
  percentile,
  PROXIED_PATH,
  reportHead,
  rssBytes,
  request,
  run,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
  type Gateway,
  type Server,
} from './lib.js'

const KEYS = envInt('BENCH_KEYS', 100_000)
const SUB_ACCOUNTS = envInt('BENCH_SUB_ACCOUNTS', 100)
const SAMPLE = envInt('BENCH_SAMPLE', 100)
/** Every n-th key is given by its SHA-256 (hex) only, as an export of hashes would. */
const DIGEST_EVERY = 10
/** The gateway's V8 old-space cap in MiB; unset, the image's (Dockerfile NODE_OPTIONS, 160). */
const MAX_OLD_SPACE_MB = process.env.BENCH_MAX_OLD_SPACE_MB ? envInt('BENCH_MAX_OLD_SPACE_MB', 160) : null

interface Counters {
  transactions: number
  inserted: number
}

/** The bench database's counters as Postgres keeps them (its statistics flush about once a second). */
async function counters(sql: postgres.Sql): Promise<Counters> {
  await sleep(1_500)
  const [row] = await sql`
    select pg_stat_clear_snapshot(), xact_commit + xact_rollback as transactions, tup_inserted as inserted
    from pg_stat_database where datname = current_database()`
  return { transactions: Number(row!.transactions), inserted: Number(row!.inserted) }
}

/** POST with no client timeout (the import of 100,000 lines can take minutes); the answer's text. */
function post(
  gateway: Gateway,
  path: string,
  apiKey: string,
  type: string,
  body: string,
): Promise<{ status: number; text: string }> {
  const url = new URL(path, gateway.url)
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: 'POST',
        headers: {
          authorization: `Bearer ${apiKey}`,
          'x-service-acting-tenant': 'self',
          'content-type': type,
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('error', reject)
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }))
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

async function main(): Promise<void> {
  const db = await createDatabase('keyimport')
  const prefix = `tgwki:${Date.now()}:`
  const sql = postgres(db.url, { max: 1, onnotice: () => {} })
  let upstream: Server | null = null
  let gateway: Gateway | null = null
  let report: string[]
  try {
    upstream = await startUpstream()
    gateway = await startGateway({
      databaseUrl: db.url,
      upstreamUrl: upstream.url,
      env: {
        REDIS_KEY_PREFIX: prefix,
        ...(MAX_OLD_SPACE_MB === null ? {} : { NODE_OPTIONS: `--max-old-space-size=${MAX_OLD_SPACE_MB}` }),
      },
    })
    const { key: parentKey } = await sql.begin((tx) =>
      createParentWithKey(tx, { name: 'key-import bench', externalId: null, extraScopes: [] }),
    )
    console.error(`${SUB_ACCOUNTS} sub-accounts…`)
    const externalIds: string[] = []
    for (let i = 0; i < SUB_ACCOUNTS; i++) {
      const externalId = `acme-${i}-${randomUUID().slice(0, 8)}`
      const res = await post(
        gateway,
        '/v1/sub-accounts',
        parentKey.apiKey,
        'application/json',
        JSON.stringify({ name: `customer ${i}`, external_id: externalId }),
      )
      if (res.status !== 201) throw new Error(`POST /v1/sub-accounts: ${res.status} ${res.text}`)
      externalIds.push(externalId)
    }

    const keys: string[] = []
    let body = ''
    for (let i = 0; i < KEYS; i++) {
      const key = `sk_live_${randomBytes(24).toString('base64url')}`
      keys.push(key)
      const given = i % DIGEST_EVERY === 0 ? { key_sha256: createHash('sha256').update(key).digest('hex') } : { key }
      body += `${JSON.stringify({ external_id: externalIds[i % SUB_ACCOUNTS], name: `imported ${i}`, scopes: ['things:read'], ...given })}\n`
    }
    console.error(`importing ${fmt(KEYS)} keys (${(Buffer.byteLength(body) / 2 ** 20).toFixed(1)} MiB)…`)
    const before = await counters(sql)
    const started = performance.now()
    const running = gateway
    let peakRss = rssBytes(running.child.pid)
    const sampling = setInterval(() => {
      peakRss = Math.max(peakRss, rssBytes(running.child.pid) || 0)
    }, 250)
    const answer = await post(
      running,
      '/v1/sub-accounts/api-keys/imports',
      parentKey.apiKey,
      'application/x-ndjson',
      body,
    ).catch((err: unknown) => {
      const after = ((performance.now() - started) / 1000).toFixed(1)
      clearInterval(sampling)
      throw new Error(`the import failed after ${after} s (${String(err)}); the gateway wrote:\n${running.output()}`)
    })
    clearInterval(sampling)
    const seconds = (performance.now() - started) / 1000
    const after = await counters(sql)
    if (answer.status !== 200) throw new Error(`import: ${answer.status} ${answer.text.slice(0, 500)}`)
    const summary = JSON.parse(answer.text.trimEnd().split('\n').at(-1)!).summary as Record<string, number>
    if (summary.imported !== KEYS) throw new Error(`import: ${JSON.stringify(summary)}`)
    const batches = Math.ceil(KEYS / IMPORT_BATCH_LINES)

    console.error(`${SAMPLE} imported keys on GET ${PROXIED_PATH}…`)
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const base = new URL(gateway.url)
    const times: number[] = []
    const statuses: Record<string, number> = {}
    for (let n = 0; n < SAMPLE; n++) {
      const i = Math.floor((n * KEYS) / SAMPLE) // spread over the file, a tenth of them by digest
      const t0 = performance.now()
      const res = await request(agent, base, {
        method: 'GET',
        path: PROXIED_PATH,
        headers: { authorization: `Bearer ${keys[i]}` },
      })
      times.push(performance.now() - t0)
      statuses[res.status] = (statuses[res.status] ?? 0) + 1
    }
    agent.destroy()
    times.sort((x, y) => x - y)

    report = [
      ...reportHead('bench:key-import'),
      '',
      `Import: ${fmt(KEYS)} lines (sk_live_ keys, one in ${DIGEST_EVERY} by its SHA-256 only) over ${SUB_ACCOUNTS} sub-accounts named by external_id, one POST, ${IMPORT_BATCH_LINES} lines a batch; gateway old space ${MAX_OLD_SPACE_MB === null ? "the image's" : `${MAX_OLD_SPACE_MB} MiB`}.`,
      '',
      ...table(
        [
          'seconds',
          'lines/s',
          'summary',
          'gateway peak RSS',
          'Postgres transactions',
          'rows inserted',
          'statements by the code',
        ],
        [
          [
            seconds.toFixed(1),
            fmt(KEYS / seconds),
            `${fmt(summary.imported!)} imported`,
            `${fmt(peakRss / 2 ** 20)} MiB`,
            fmt(after.transactions - before.transactions),
            fmt(after.inserted - before.inserted),
            `${fmt(batches * 3)} (${batches} batches × 3)`,
          ],
        ],
      ),
      '',
      'Postgres transactions and rows inserted: pg_stat_database deltas of the bench database over the import (anything else the gateway did meanwhile included).',
      '',
      `Authentication: ${SAMPLE} imported keys, each new to the gateway, GET ${PROXIED_PATH} one after another.`,
      '',
      ...table(
        ['statuses', 'p50 ms', 'p99 ms'],
        [[counts(statuses), ms(percentile(times, 0.5)), ms(percentile(times, 0.99))]],
      ),
    ]
  } finally {
    await sql.end({ timeout: 5 })
    await stopChild(gateway?.child)
    await stopChild(upstream?.child)
    await deleteRedisPrefix(prefix)
    await db.drop()
  }
  console.log(report.join('\n'))
}

run(main)
