// Bulk seeding for the scale bench (issue 6): one parent account, S sub-accounts, K keys per
// sub-account and D days of usage, written with set-based SQL and COPY, never through the API.
//
// Everything is a function of a seed string (the database's name), so that the bench can rebuild
// any key's plaintext, any sub-account's id and external_id, without keeping 1,000,000 secrets:
//   sub-account i (0 ≤ i < S)  id md5(seed:sub:i) as a UUID, external_id `ext-i`, created in order i
//   key n (0 ≤ n < S·K)        belongs to sub-account floor(n / K); plaintext keyFor(seed, n)
//   the parent's key           keyFor(seed, -1), scopes sub_accounts:read sub_accounts:write
//   deactivated                sub-accounts with i % 100 = 99
//   usage                      D days up to today (UTC) for sub-accounts with i % 10 ≠ 0: 2xx every
//                              day, 4xx one day in 3, 5xx one day in 29
// Key plaintexts have the shape and checksum of DESIGN §3 (`tgw_` + 43 base62 + 6 base62 of the
// CRC32), so the gateway accepts them; their 43 body characters come from SHA-512(seed:key:n)
// instead of a random source. Only SHA-256 digests reach the database, as with minted keys.
//
// Run alone (leaves the database for EXPLAIN by hand; drop it yourself):
//   npx tsx bench/seed.ts <subAccounts> [database name]
import { createHash } from 'node:crypto'
import { resolve } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { fileURLToPath } from 'node:url'
import { crc32 } from 'node:zlib'
import postgres from 'postgres'
import { isWellFormedKey } from '../src/auth/keys.js'
import { migrate } from '../src/store/migrate.js'

type Sql = postgres.Sql

export interface SeedSpec {
  /** Names every id and key; the bench uses the database name. */
  seed: string
  subAccounts: number
  keysPerSub: number
  usageDays: number
}

export interface Seeded extends SeedSpec {
  parentId: string
  parentKey: string
  /** Milliseconds per phase, for the report. */
  timings: Record<string, number>
}

/** The scopes every seeded sub-account key carries. */
export const SUB_KEY_SCOPES = ['things:read', 'things:write']

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** The same checksum as src/auth/keys.ts (not exported there): base62 of the CRC32, 6 characters. */
function checksum(text: string): string {
  let value = crc32(text)
  let out = ''
  for (let i = 0; i < 6; i++) {
    out = BASE62[value % 62] + out
    value = Math.floor(value / 62)
  }
  return out
}

/** Key n's plaintext (n = -1: the parent's key). */
export function keyFor(seed: string, n: number): string {
  const bytes = createHash('sha512').update(`${seed}:key:${n}`).digest()
  let body = 'tgw_'
  for (let i = 0; i < 43; i++) body += BASE62[bytes[i]! % 62]
  return body + checksum(body)
}

export function keyDigest(key: string): Buffer {
  return createHash('sha256').update(key).digest()
}

/** md5(text) as a UUID, as Postgres' `md5(text)::uuid` writes it. */
function md5Uuid(text: string): string {
  const h = createHash('md5').update(text).digest('hex')
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}

export const parentIdOf = (seed: string) => md5Uuid(`${seed}:parent`)
export const subIdOf = (seed: string, i: number) => md5Uuid(`${seed}:sub:${i}`)
export const extIdOf = (i: number) => `ext-${i}`
/** One sub-account in a hundred is seeded deactivated. */
export const isSeededDeactivated = (i: number) => i % 100 === 99

const progress = (message: string) => console.error(`  seed: ${message}`)

async function timed<T>(timings: Record<string, number>, phase: string, run: () => Promise<T>): Promise<T> {
  const t0 = performance.now()
  const result = await run()
  timings[phase] = performance.now() - t0
  progress(`${phase} in ${(timings[phase]! / 1000).toFixed(1)} s`)
  return result
}

/** Rows of key n for COPY … (tenant_id, name, scopes, prefix, key_digest, created_at) in text format. */
function* keyLines(spec: SeedSpec, createdFrom: number): Generator<string> {
  const total = spec.subAccounts * spec.keysPerSub
  const scopes = `{${SUB_KEY_SCOPES.join(',')}}`
  const step = Math.max(1, Math.floor(total / 10))
  let chunk = ''
  for (let n = 0; n < total; n++) {
    const sub = Math.floor(n / spec.keysPerSub)
    const key = keyFor(spec.seed, n)
    const createdAt = new Date(createdFrom + n * 1000).toISOString()
    // bytea in COPY's text format: \x… with the backslash itself escaped.
    chunk += `${subIdOf(spec.seed, sub)}\tkey ${n % spec.keysPerSub}\t${scopes}\t${key.slice(0, 12)}\t\\\\x${keyDigest(key).toString('hex')}\t${createdAt}\n`
    if (chunk.length > 1 << 16) {
      yield chunk
      chunk = ''
    }
    if ((n + 1) % step === 0) progress(`keys ${(n + 1).toLocaleString('en-US')} / ${total.toLocaleString('en-US')}`)
  }
  if (chunk !== '') yield chunk
}

/** Migrates an empty database and fills it. */
export async function seed(sql: Sql, spec: SeedSpec): Promise<Seeded> {
  const timings: Record<string, number> = {}
  const parentId = parentIdOf(spec.seed)
  const parentKey = keyFor(spec.seed, -1)
  if (!isWellFormedKey(parentKey) || !isWellFormedKey(keyFor(spec.seed, 0))) throw new Error('seeded keys do not pass isWellFormedKey')
  await timed(timings, 'migrate', () => migrate(sql))

  await timed(timings, `tenants (1 parent + ${spec.subAccounts.toLocaleString('en-US')} sub-accounts)`, () =>
    sql.begin(async (tx) => {
      await tx`
        insert into tenants (id, name, external_id, created_at, updated_at)
        values (${parentId}, 'scale bench parent', null, now() - interval '400 days', now() - interval '400 days')`
      await tx`
        insert into api_keys (tenant_id, name, scopes, prefix, key_digest)
        values (${parentId}, 'initial', ${tx.array(['sub_accounts:read', 'sub_accounts:write'])},
                ${parentKey.slice(0, 12)}, ${keyDigest(parentKey)})`
      // Ordered by n, so that seq (the list's order) follows i.
      await tx`
        insert into tenants (id, parent_id, name, external_id, status, metadata, created_at, updated_at, deactivated_at)
        select md5(${spec.seed} || ':sub:' || n)::uuid, ${parentId}, 'sub-account ' || n, 'ext-' || n,
               case when n % 100 = 99 then 'deactivated' else 'active' end,
               jsonb_build_object('plan', case when n % 3 = 0 then 'pro' else 'free' end, 'region', 'eu-' || (n % 4)),
               at, at, case when n % 100 = 99 then at + interval '1 day' else null end
        from generate_series(0, ${spec.subAccounts - 1}::int) as n,
             lateral (select now() - interval '365 days' + n * (interval '360 days' / ${spec.subAccounts}::int)) as t (at)
        order by n`
    }),
  )

  const keys = spec.subAccounts * spec.keysPerSub
  await timed(timings, `api_keys (${keys.toLocaleString('en-US')}, COPY from Node)`, async () => {
    const createdFrom = Date.now() - 365 * 86_400_000
    await sql.begin(async (tx) => {
      // The rows are consistent by construction: skip the per-row foreign-key triggers.
      await tx`set local session_replication_role = replica`
      const writable = await tx`copy api_keys (tenant_id, name, scopes, prefix, key_digest, created_at) from stdin`.writable()
      await pipeline(Readable.from(keyLines(spec, createdFrom)), writable)
    })
  })

  await timed(timings, `usage_daily (${spec.usageDays} days)`, () =>
    sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      // 2xx every day, 4xx one day in three, 5xx one day in 29, for nine sub-accounts in ten.
      await tx`
        insert into usage_daily (tenant_id, day, status_class, requests)
        select md5(${spec.seed} || ':sub:' || n)::uuid, ((now() at time zone 'utc')::date - d), c,
               case c when 2 then 50 + (n * 7 + d * 13) % 950 when 4 then 1 + (n + d) % 20 else 1 end
        from generate_series(0, ${spec.subAccounts - 1}::int) as n,
             generate_series(0, ${spec.usageDays - 1}::int) as d,
             unnest(array[2, 4, 5]::smallint[]) as c
        where n % 10 <> 0
          and (c = 2 or (c = 4 and (n + d) % 3 = 0) or (c = 5 and (n + d) % 29 = 0))`
    }),
  )

  // What autovacuum would have done to a database that has been running: statistics for the
  // planner, and a visibility map for index-only scans.
  await timed(timings, 'vacuum analyze', async () => {
    for (const table of ['tenants', 'api_keys', 'usage_daily']) await sql.unsafe(`vacuum (analyze) ${table}`)
  })

  const [counts] = await sql<{ tenants: number; keys: number; usage: number }[]>`
    select (select count(*)::int from tenants) as tenants, (select count(*)::int from api_keys) as keys,
           (select count(*)::int from usage_daily) as usage`
  progress(`done: ${counts!.tenants} tenants, ${counts!.keys} keys, ${counts!.usage} usage rows`)
  if (counts!.tenants !== spec.subAccounts + 1 || counts!.keys !== keys + 1) throw new Error('seeded counts are wrong')
  const [check] = await sql<{ id: string }[]>`select id from tenants where external_id = ${extIdOf(0)} and parent_id = ${parentId}`
  if (check?.id !== subIdOf(spec.seed, 0)) throw new Error(`md5 ids differ between Node and Postgres: ${check?.id} vs ${subIdOf(spec.seed, 0)}`)
  return { ...spec, parentId, parentKey, timings }
}

/** `tsx bench/seed.ts <subAccounts> [database]`: creates (or fills an empty) database and leaves it. */
async function runAlone(): Promise<void> {
  const subAccounts = Number(process.argv[2])
  if (!Number.isSafeInteger(subAccounts) || subAccounts < 1) throw new Error('usage: tsx bench/seed.ts <subAccounts> [database]')
  const dbName = process.argv[3] ?? `tgw_scale_${subAccounts}`
  if (!/^[a-z_][a-z0-9_]*$/.test(dbName)) throw new Error('the database name must be a plain lower-case identifier')
  const adminUrl = process.env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} })
  const url = new URL(adminUrl)
  url.pathname = `/${dbName}`
  try {
    await admin.unsafe(`create database ${dbName}`)
  } finally {
    await admin.end()
  }
  const sql = postgres(url.toString(), { max: 2, onnotice: () => {} })
  try {
    const seeded = await seed(sql, { seed: dbName, subAccounts, keysPerSub: 10, usageDays: 30 })
    console.log(JSON.stringify({ database: dbName, parentId: seeded.parentId, parentKey: seeded.parentKey, timings: seeded.timings }))
  } finally {
    await sql.end()
  }
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await runAlone()
}
