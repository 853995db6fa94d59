import postgres from 'postgres'
import { migrate } from '../src/store/migrate.js'
const admin = postgres('postgres://postgres@127.0.0.1:5432/postgres', { max: 1, onnotice: () => {} })
const name = 'tgw_probe_' + Date.now()
await admin.unsafe(`create database ${name}`)
const sql = postgres(`postgres://postgres@127.0.0.1:5432/${name}`, { max: 1, onnotice: () => {} })
try {
  await migrate(sql)
  const [p] = await sql`insert into tenants (name) values ('p') returning id`
  await sql`insert into tenants (parent_id, name) select ${p!.id}, 'seeded ' || n from generate_series(1, 10000) n`
  await sql`analyze tenants`
  for (const ob of ['seq', 'tenants.seq']) {
    const rows = await sql.unsafe(`explain analyze select id, seq::text as seq from tenants where parent_id = $1 order by ${ob} limit 21`, [p!.id])
    console.log(`--- order by ${ob}`); for (const r of rows) console.log(Object.values(r)[0])
    const first = await sql.unsafe(`select name, seq::text as seq from tenants where parent_id = $1 order by ${ob} limit 5`, [p!.id])
    console.log(first.map((r) => `${r.name}(${r.seq})`).join(', '))
  }
} finally {
  await sql.end()
  await admin.unsafe(`drop database ${name} with (force)`)
  await admin.end()
}
