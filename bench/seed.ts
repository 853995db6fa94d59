// Bulk seeding for bench:scale and bench:management: one parent, S sub-accounts, K keys each and
// D days of usage, written with set-based SQL and COPY, never through the API. Everything follows
// from a seed string (the database's name), so that a bench can rebuild any key's plaintext and
// any sub-account's id without keeping a million secrets:
//   sub-account i (0 ≤ i < S)  id md5(seed:sub:i) as a UUID, external_id `ext-i`, created in order i;
//                              deactivated when i % 100 = 99
//   key n (0 ≤ n < S·K)        belongs to sub-account floor(n / K), plaintext keyFor(seed, n);
//                              the parent's is keyFor(seed, -1)
//   usage                      D days up to today (UTC) for sub-accounts with i % 10 ≠ 0: 2xx every
//                              day, 4xx one day in 3, 5xx one day in 29
// Keys have the shape and checksum of docs/api.md (`tgw_` + 43 base62 + 6 base62 of the CRC32);
// only their SHA-256 digests reach the database, as with minted keys.
import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { crc32 } from 'node:zlib'
import type postgres from 'postgres'
import { migrate } from '../src/store/migrate.js'

export interface Seeded {
  seed: string
  subAccounts: number
  keysPerSub: number
  parentId: string
  parentKey: string
  /** Seconds per phase, for the report. */
  timings: Record<string, number>
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** Key n's plaintext (n = -1: the parent's). Its 43 characters come from SHA-512, not a random source. */
export function keyFor(seed: string, n: number): string {
  const bytes = createHash('sha512').update(`${seed}:key:${n}`).digest()
  let body = 'tgw_'
  for (let i = 0; i < 43; i++) body += BASE62[bytes[i]! % 62]
  let sum = crc32(body)
  let checksum = ''
  for (let i = 0; i < 6; i++, sum = Math.floor(sum / 62)) checksum = BASE62[sum % 62] + checksum
  return body + checksum
}

export const keyDigest = (key: string) => createHash('sha256').update(key).digest()
/** md5(text) as a UUID, as Postgres writes `md5(text)::uuid`. */
const md5Uuid = (text: string) =>
  createHash('md5')
    .update(text)
    .digest('hex')
    .replace(/^(.{8})(.{4})(.{4})(.{4})/, '$1-$2-$3-$4-')
export const subIdOf = (seed: string, i: number) => md5Uuid(`${seed}:sub:${i}`)
export const extIdOf = (i: number) => `ext-${i}`
export const isSeededDeactivated = (i: number) => i % 100 === 99

/** Rows of COPY api_keys (tenant_id, name, scopes, prefix, key_digest, created_at), text format. */
function* keyLines(seed: string, total: number, keysPerSub: number): Generator<string> {
  const createdFrom = Date.now() - 365 * 86_400_000
  let chunk = ''
  for (let n = 0; n < total; n++) {
    const key = keyFor(seed, n)
    // bytea in COPY's text format: \x… with the backslash itself escaped.
    chunk += `${subIdOf(seed, Math.floor(n / keysPerSub))}\tkey ${n % keysPerSub}\t{things:read,things:write}\t${key.slice(0, 12)}\t\\\\x${keyDigest(key).toString('hex')}\t${new Date(createdFrom + n * 1000).toISOString()}\n`
    if (chunk.length > 1 << 16) {
      yield chunk
      chunk = ''
    }
  }
  yield chunk
}

/** Migrates an empty database and fills it. */
export async function seed(
  sql: postgres.Sql,
  spec: { seed: string; subAccounts: number; keysPerSub: number; usageDays: number },
): Promise<Seeded> {
  const { seed, subAccounts, keysPerSub, usageDays } = spec
  const timings: Record<string, number> = {}
  const timed = async (phase: string, step: () => Promise<unknown>) => {
    const t0 = performance.now()
    await step()
    timings[phase] = (performance.now() - t0) / 1000
    console.error(`  seed: ${phase} in ${timings[phase]!.toFixed(1)} s`)
  }
  const parentId = md5Uuid(`${seed}:parent`)
  const parentKey = keyFor(seed, -1)
  await timed('migrate', () => migrate(sql))
  await timed('tenants', () =>
    sql.begin(async (tx) => {
      await tx`insert into tenants (id, name, created_at) values (${parentId}, 'bench parent', now() - interval '400 days')`
      await tx`
        insert into api_keys (tenant_id, name, scopes, prefix, key_digest)
        values (${parentId}, 'initial', ${tx.array(['sub_accounts:read', 'sub_accounts:write'])}, ${parentKey.slice(0, 12)}, ${keyDigest(parentKey)})`
      // Ordered by n, so that seq (the list's order) follows i.
      await tx`
        insert into tenants (id, parent_id, name, external_id, status, metadata, created_at, updated_at, deactivated_at)
        select md5(${seed} || ':sub:' || n)::uuid, ${parentId}, 'sub-account ' || n, 'ext-' || n,
               case when n % 100 = 99 then 'deactivated' else 'active' end,
               jsonb_build_object('plan', case when n % 3 = 0 then 'pro' else 'free' end, 'region', 'eu-' || (n % 4)),
               at, at, case when n % 100 = 99 then at + interval '1 day' else null end
        from generate_series(0, ${subAccounts - 1}::int) as n,
             lateral (select now() - interval '365 days' + n * (interval '360 days' / ${subAccounts}::int)) as t (at)
        order by n`
    }),
  )
  await timed('api_keys (COPY)', () =>
    sql.begin(async (tx) => {
      // Consistent by construction: the per-row foreign-key triggers are skipped.
      await tx`set local session_replication_role = replica`
      await pipeline(
        Readable.from(keyLines(seed, subAccounts * keysPerSub, keysPerSub)),
        await tx`copy api_keys (tenant_id, name, scopes, prefix, key_digest, created_at) from stdin`.writable(),
      )
    }),
  )
  await timed('usage_daily', () =>
    sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      await tx`
        insert into usage_daily (tenant_id, day, status_class, requests)
        select md5(${seed} || ':sub:' || n)::uuid, ((now() at time zone 'utc')::date - d), c,
               case c when 2 then 50 + (n * 7 + d * 13) % 950 when 4 then 1 + (n + d) % 20 else 1 end
        from generate_series(0, ${subAccounts - 1}::int) as n, generate_series(0, ${usageDays - 1}::int) as d, unnest(array[2, 4, 5]::smallint[]) as c
        where n % 10 <> 0 and (c = 2 or (c = 4 and (n + d) % 3 = 0) or (c = 5 and (n + d) % 29 = 0))`
    }),
  )
  // What autovacuum would have done to a database that has been running: statistics for the
  // planner, and a visibility map for index-only scans.
  await timed('vacuum analyze', () => sql.unsafe('vacuum (analyze) tenants, api_keys, usage_daily'))
  const [check] = await sql<{ id: string; keys: number }[]>`
    select id, (select count(*)::int from api_keys) as keys from tenants where external_id = ${extIdOf(0)} and parent_id = ${parentId}`
  if (check?.id !== subIdOf(seed, 0) || check.keys !== subAccounts * keysPerSub + 1)
    throw new Error(`seeding went wrong: ${JSON.stringify(check)}`)
  return { seed, subAccounts, keysPerSub, parentId, parentKey, timings }
}
