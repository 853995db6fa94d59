// The sub-accounts list's search by a word (docs/api.md, Sub-accounts: `q`) at size: BENCH_SUBS
// sub-accounts (10^5 by default) of one parent, named from word lists as people name warehouses
// and shops ("Warehouse North 4711"), then a page of 20 for searches from the broadest (a word in
// one name of 16) to none matching, each BENCH_RUNS times, through the store's own listing; with
// the EXPLAIN of the slowest. Target: p99 ≤ 50 ms.
//   npm run bench:sub-account-search
import postgres from 'postgres'
import { listSubAccounts, subAccountPage, subAccountSearch } from '../src/store/sub-account-list.js'
import { migrate } from '../src/store/migrate.js'
import { createDatabase, envInt, fmt, percentile, reportHead, run } from './lib.js'

const SUBS = envInt('BENCH_SUBS', 100_000)
const RUNS = envInt('BENCH_RUNS', 100)
const KINDS = ['Warehouse', 'Depot', 'Shop', 'Store', 'Hub', 'Office', 'Plant', 'Yard']
/** A first page of 20, no other filter. */
const FILTER = { limit: 20, afterSeq: null, status: null, externalId: null }
const PLACES = ['North', 'South', 'East', 'West', 'Central', 'Harbour', 'Airport', 'Riverside']

async function main(): Promise<void> {
  console.log(reportHead('bench/sub-account-search.ts').join('\n'))
  const db = await createDatabase('search')
  const sql = postgres(db.url, { max: 2, onnotice: () => {} })
  try {
    await migrate(sql)
    const [parent] = await sql<{ id: string }[]>`insert into tenants (name) values ('bench parent') returning id`
    const seeded = performance.now()
    await sql`
      insert into tenants (name, parent_id, external_id)
      select (${sql.array(KINDS)}::text[])[1 + i % 8] || ' ' || (${sql.array(PLACES)}::text[])[1 + (i / 8) % 8] || ' ' || i,
        ${parent!.id}, 'cust-' || lpad(i::text, 6, '0')
      from generate_series(1, ${SUBS}) as i`
    await sql`vacuum analyze tenants`
    await sql`vacuum analyze tenant_name_words`
    console.log(`seeded ${fmt(SUBS)} sub-accounts in ${((performance.now() - seeded) / 1000).toFixed(1)} s\n`)
    const searches: [string, string][] = [
      ['a word in 1 of 8 names', 'north'],
      ['the start of a word', 'har'],
      ['the start of a name, two words', 'warehouse no'],
      ['a word in 1 name', String(Math.floor(SUBS / 2) + 7)],
      ['an external id', 'cust-0421'],
      ['nothing', 'zebra'],
      ['1,111 names, most of them the newest (newest first)', '47'],
    ]
    console.log('| search | q | matches on the page | p50 ms | p99 ms |')
    console.log('|:--|:--|--:|--:|--:|')
    let slowest: { q: string; p99: number; sort: '-created_at' | null } = { q: '', p99: 0, sort: null }
    for (const [what, q] of searches) {
      const times: number[] = []
      let found = 0
      for (let i = 0; i < RUNS; i++) {
        const t0 = performance.now()
        const page = await listSubAccounts(sql as never, parent!.id, {
          ...FILTER,
          search: q,
          ...(what.includes('newest first') ? { sort: '-created_at' as const } : {}),
        })
        times.push(performance.now() - t0)
        found = page.length
      }
      times.sort((a, b) => a - b)
      const p99 = percentile(times, 0.99)
      if (p99 > slowest.p99) slowest = { q, p99, sort: what.includes('newest first') ? '-created_at' : null }
      console.log(`| ${what} | \`${q}\` | ${found} | ${percentile(times, 0.5).toFixed(2)} | ${p99.toFixed(2)} |`)
    }
    console.log(
      `\nthe slowest, \`${slowest.q}\`, EXPLAIN (ANALYZE, BUFFERS) of the count, the window and the matches' order:`,
    )
    // Its statements: the count of its matches, then the page as listSubAccounts reads it.
    const filter = { ...FILTER, search: slowest.q, ...(slowest.sort === null ? {} : { sort: slowest.sort }) }
    const statements = [subAccountSearch(parent!.id, slowest.q)]
    for (const plan of ['window', 'order'] as const) statements.push(subAccountPage(parent!.id, filter, { by: plan }))
    for (const { s, text } of statements) {
      console.log('')
      for (const row of await sql.unsafe(`explain (analyze, buffers) ${text}`, s.values))
        console.log(`  ${Object.values(row)[0]}`)
    }
  } finally {
    await sql.end()
    await db.drop()
  }
}

run(main)
