// Tenants: parent accounts and their sub-accounts. SQL only; callers pass `sql` or a transaction.
import type { KeyPolicy } from '../guardrails/key-policy.js'
import type { TenantLimits } from '../shared/tenant-limits.js'
import type { Sql, Tx } from './db.js'
import { Statement } from './statement.js'
import type { TenantStatus } from '../shared/tenancy-records.js'

type Db = Sql | Tx

export interface TenantRow {
  id: string
  parent_id: string | null
  name: string
  external_id: string | null
  status: TenantStatus
  metadata: Record<string, string>
  created_at: Date
  updated_at: Date
  deactivated_at: Date | null
  /** null: no limits (docs/api.md, Limits and quotas). */
  limits: TenantLimits | null
  /** A sub-account's key policy; null: none (docs/api.md, Key policies). */
  key_policy: KeyPolicy | null
}

/** A page row also carries its position, which the caller turns into a cursor (and, sorted by name, its sort value). */
export type TenantPageRow = TenantRow & { seq: string; sort_key?: string }

/** The orders of the sub-accounts list (docs/api.md, Sub-accounts): a `-` is descending. */
export const SUB_ACCOUNT_SORTS = ['created_at', '-created_at', 'name', '-name'] as const
export type SubAccountSort = (typeof SUB_ACCOUNT_SORTS)[number]

/** Thrown when an external_id is already taken among the parent's sub-accounts. */
export class ExternalIdTakenError extends Error {
  constructor() {
    super('external_id already in use')
    this.name = 'ExternalIdTakenError'
  }
}

export const COLUMNS =
  'id, parent_id, name, external_id, status, metadata, created_at, updated_at, deactivated_at, limits, key_policy'

function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: string }).code === '23505'
}

/** Runs a write of tenants, a taken external_id thrown as ExternalIdTakenError. */
export async function rethrowConflict<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run()
  } catch (err) {
    if (isUniqueViolation(err)) throw new ExternalIdTakenError()
    throw err
  }
}

export function createParentAccount(db: Db, input: { name: string; externalId: string | null }): Promise<TenantRow> {
  return rethrowConflict(async () => {
    const [row] = await db<TenantRow[]>`
      insert into tenants (name, external_id) values (${input.name}, ${input.externalId})
      returning ${db.unsafe(COLUMNS)}`
    return row!
  })
}

export interface NewSubAccount {
  name: string
  externalId: string | null
  metadata: Record<string, string>
  /** Stored as given: absent or null for none, else an object with a limit (shared/tenant-limits.ts storedLimits). */
  limits?: TenantLimits | null
  /** Stored as given: absent or null for none (guardrails/key-policy.ts storedKeyPolicy). */
  keyPolicy?: KeyPolicy | null
}

/** The insert of a sub-account returning its row, a statement or a CTE, its values parameters of `s`. */
export function insertSubAccountSql(db: Db, s: Statement, parentId: string, input: NewSubAccount): string {
  return `insert into tenants (parent_id, name, external_id, metadata, limits, key_policy)
    values (${s.param(parentId)}, ${s.param(input.name)}, ${s.param(input.externalId)}, ${s.json(db, input.metadata)},
            ${input.limits == null ? 'null' : s.json(db, input.limits)},
            ${input.keyPolicy == null ? 'null' : s.json(db, input.keyPolicy)})
    returning ${COLUMNS}`
}

export function createSubAccount(db: Db, parentId: string, input: NewSubAccount): Promise<TenantRow> {
  return rethrowConflict(async () => {
    const s = new Statement()
    const [row] = await s.run<TenantRow[]>(db, insertSubAccountSql(db, s, parentId, input))
    return row!
  })
}

export async function getTenant(db: Db, id: string): Promise<TenantRow | null> {
  const [row] = await db<TenantRow[]>`select ${db.unsafe(COLUMNS)} from tenants where id = ${id}`
  return row ?? null
}

export async function getSubAccount(db: Db, parentId: string, id: string): Promise<TenantRow | null> {
  const [row] = await db<TenantRow[]>`
    select ${db.unsafe(COLUMNS)} from tenants where id = ${id} and parent_id = ${parentId}`
  return row ?? null
}

export async function findSubAccountIdByExternalId(
  db: Db,
  parentId: string,
  externalId: string,
): Promise<string | null> {
  const [row] = await db<{ id: string }[]>`
    select id from tenants where parent_id = ${parentId} and external_id = ${externalId}`
  return row?.id ?? null
}

/** Whether the parent has an active sub-account: `exists` stops at the first, where a count
 * read all of them (20 ms at 100,000 sub-accounts; bench/RESULTS.md at e5da086). */
export async function hasActiveSubAccounts(db: Db, parentId: string): Promise<boolean> {
  const [row] = await db<{ any: boolean }[]>`
    select exists (select 1 from tenants where parent_id = ${parentId} and status = 'active') as any`
  return row!.any
}

export async function countTenants(db: Db): Promise<number> {
  const [row] = await db<{ n: number }[]>`select count(*)::int as n from tenants`
  return row!.n
}

export interface SubAccountFilter {
  limit: number
  /** Return rows strictly after this position (from a cursor). */
  afterSeq: string | null
  /** The order (default `created_at`, oldest first). */
  sort?: SubAccountSort
  /** Sorted by name: the last row's sort value (lower(name)), from the same cursor as `afterSeq`. */
  afterSortKey?: string | null
  status: TenantStatus | null
  externalId: string | null
  /** The start of any word of the name, of the name or of the external_id, case-insensitive (`%` and `_` are literal). */
  search: string | null
}

/** `text` as the start of a LIKE pattern that matches it literally: `\\`, `%` and `_` escaped. */
export function likePrefix(text: string): string {
  return `${text.replace(/[\\%_]/g, '\\$&')}%`
}

/**
 * One page by keyset: on `seq` (oldest or newest first; `seq` is insertion order, as `created_at`
 * is), or on (lower(name), seq) sorted by name, so that the cost of a page does not grow with its
 * depth and a page never skips or repeats a row however many share a name.
 *
 * A search (bench/README.md, sub-account search) first counts its matches from its three indexes
 * (`subAccountSearch`). A few are paged by their ids. More are looked for in the next
 * `SEARCH_WINDOW` sub-accounts of the page's order, where matches that many are usually dense;
 * if that does not fill the page (they lie further on), a page of them in `seq` order is read
 * from the matches' indexes, or, sorted by name or filtered, the page's order is walked to the end.
 * A search is planned for its own prefix every time (a prepared statement's generic plan cannot
 * use the prefix indexes for a pattern it does not know).
 */
export async function listSubAccounts(db: Db, parentId: string, filter: SubAccountFilter): Promise<TenantPageRow[]> {
  const page = async (plan?: SearchPlan) => {
    const { s, text } = subAccountPage(parentId, filter, plan)
    return plan === undefined ? s.run<TenantPageRow[]>(db, text) : s.runPlannedEachTime<TenantPageRow[]>(db, text)
  }
  if (filter.search === null) return page()
  const search = subAccountSearch(parentId, filter.search)
  const [{ ids }] = (await search.s.runPlannedEachTime<{ ids: string[] | null }[]>(db, search.text)) as [
    { ids: string[] | null },
  ]
  if ((ids?.length ?? 0) <= FEW_MATCHES) return page({ by: 'ids', ids: [...new Set(ids)] })
  const windowed = await page({ by: 'window' })
  if (windowed.length === filter.limit) return windowed
  const bySeq = !(filter.sort ?? 'created_at').endsWith('name')
  return page(bySeq && filter.status === null && filter.externalId === null ? { by: 'order' } : { by: 'walk' })
}

/** Up to this many matches of a search are paged by their ids. */
const FEW_MATCHES = 1000
/** How many sub-accounts of the page's order a search of many matches looks at first. */
const SEARCH_WINDOW = 500

/**
 * How a page of a search is read: by the ids of its few matches; in a window of the page's order;
 * from the matches' indexes in `seq` order; or walking the page's order.
 */
export type SearchPlan = { by: 'ids'; ids: readonly string[] } | { by: 'window' } | { by: 'order' } | { by: 'walk' }

/** `search` as the pattern of a LIKE, case-folded in SQL as the columns are. */
function searchPattern(s: Statement, search: string): string {
  return `lower(${s.param(likePrefix(search))})`
}

/**
 * The sub-accounts a search finds, with their `seq` (an id may be found twice, by a word and by
 * the name's start): the start of any word of the name (migration 027's words), or of the whole
 * name, or of the external id, each read from its index. `past`: a condition on a branch's
 * `seq`, given its table's alias.
 */
function searchMatches(parent: string, pattern: string, past: (alias: string) => string = () => ''): string {
  return `select w.tenant_id as id, w.seq from tenant_name_words w
      where w.parent_id = ${parent} and w.word like ${pattern} escape '\\'${past('w')}
    union all select n.id, n.seq from tenants n
      where n.parent_id = ${parent} and lower(n.name) like ${pattern} escape '\\'${past('n')}
    union all select e.id, e.seq from tenants e
      where e.parent_id = ${parent} and lower(e.external_id) like ${pattern} escape '\\'${past('e')}`
}

/** The ids of a search's matches, `FEW_MATCHES + 1` at most: are they few? (A test reads its plan.) */
export function subAccountSearch(parentId: string, search: string): { s: Statement; text: string } {
  const s = new Statement()
  // As JSON: postgres.js knows JSON's type without reading the catalogue (an array of uuids it may not).
  const text = `select json_agg(id) as ids from (
      select id from (${searchMatches(s.param(parentId), searchPattern(s, search))}) as m
      limit ${s.param(FEW_MATCHES + 1)}) as found`
  return { s, text }
}

/** The statement of a page (a test reads its plan); with a search, read as `plan` says. */
export function subAccountPage(
  parentId: string,
  filter: SubAccountFilter,
  plan: SearchPlan = { by: 'walk' },
): { s: Statement; text: string } {
  const s = new Statement()
  const sort = filter.sort ?? 'created_at'
  const descending = sort.startsWith('-')
  const byName = sort.endsWith('name')
  const after = descending ? '<' : '>'
  const direction = descending ? 'desc' : 'asc'
  // `tenants.seq`: the table's, not the text the select list names `seq`.
  const order = `${byName ? `lower(name) ${direction}, ` : ''}tenants.seq ${direction}`
  const parent = s.param(parentId)
  const where = [`parent_id = ${parent}`]
  const afterSeq = filter.afterSeq === null ? null : s.param(filter.afterSeq)
  if (afterSeq !== null)
    where.push(
      byName
        ? `(lower(name), seq) ${after} (${s.param(filter.afterSortKey ?? '')}, ${afterSeq})`
        : `seq ${after} ${afterSeq}`,
    )
  if (filter.status !== null) where.push(`status = ${s.param(filter.status)}`)
  if (filter.externalId !== null) where.push(`external_id = ${s.param(filter.externalId)}`)
  let from = 'tenants'
  if (filter.search !== null) {
    // Its parameter made only where it is used: Postgres cannot type one that is not.
    const pattern = () => searchPattern(s, filter.search!)
    if (plan.by === 'ids') where.push(`tenants.id = any(${s.param(`{${plan.ids.join(',')}}`)}::uuid[])`)
    else if (plan.by === 'order') {
      // The page's ids from the matches' own indexes, in the list's order: no sub-account read
      // but the page's. Nothing else filters the list here, so each is on the page.
      const matches = searchMatches(parent, pattern(), (alias) =>
        afterSeq === null ? '' : ` and ${alias}.seq ${after} ${afterSeq}`,
      )
      where.push(`tenants.id = any(array(select m.id from (${matches}) as m
        group by m.id, m.seq order by m.seq ${direction} limit ${s.param(filter.limit)}))`)
    } else {
      // Tested row by row as the order is walked (`offset 0`: a probe of the row's own words, not
      // a hash of every match built first).
      if (plan.by === 'window') {
        from = `(select * from tenants where ${where.join(' and ')} order by ${order} limit ${s.param(SEARCH_WINDOW)}) as tenants`
        where.length = 0
      }
      const like = pattern()
      where.push(`(lower(name) like ${like} escape '\\' or lower(external_id) like ${like} escape '\\'
        or exists (select from tenant_name_words w
          where w.tenant_id = tenants.id and w.word like ${like} escape '\\' offset 0))`)
    }
  }
  // The sort value is read back from the row (not lower-cased again in JavaScript): the cursor
  // then holds exactly what Postgres compares, whatever the database's locale.
  const text = `select ${COLUMNS}, seq::text as seq${byName ? ', lower(name) as sort_key' : ''} from ${from}
    where ${where.join(' and ')}
    order by ${order}
    limit ${s.param(filter.limit)}`
  return { s, text }
}

export interface SubAccountPatch {
  name?: string
  /** null clears the external_id. */
  externalId?: string | null
  metadata?: Record<string, string>
  /** Replaces the whole object; null clears it (stored as given, see createSubAccount). */
  limits?: TenantLimits | null
  /** Replaces the whole policy; null clears it (stored as given). */
  keyPolicy?: KeyPolicy | null
}

/** A parent account's scope ceiling, set by the operator (docs/api.md, Key policies); null: any. */
export async function scopeCeiling(db: Db, accountId: string): Promise<string[] | null> {
  const [row] = await db<{ allowed: string[] | null }[]>`
    select to_jsonb(allowed_scopes) as allowed from tenants where id = ${accountId}`
  return row?.allowed ?? null
}

/** What the sub-accounts list adds to each row on request (`include`, docs/api.md, Sub-accounts). */
export interface SubAccountFigures {
  /** Keys neither revoked nor expired. */
  key_count: number
  /** Request units of the current UTC month (forwarded requests at their routes' cost): what a monthly quota counts. */
  usage_this_month: number
}

/**
 * The figures of some sub-accounts of one parent, in one statement: their active keys, and their
 * forwarded requests from `monthStart` (YYYY-MM-DD) to `nextMonthStart` (excluded). An id that is
 * not the parent's sub-account is left out.
 */
export async function subAccountFigures(
  db: Db,
  parentId: string,
  ids: readonly string[],
  month: { first: string; next: string },
): Promise<Map<string, SubAccountFigures>> {
  if (ids.length === 0) return new Map()
  const rows = await db<{ id: string; key_count: number; usage_this_month: string }[]>`
    select t.id,
      (select count(*)::int from api_keys k
        where k.tenant_id = t.id and k.status = 'active' and (k.expires_at is null or k.expires_at > now())
      ) as key_count,
      (select coalesce(sum(u.units), 0)::text from usage_period_units u
        where u.tenant_id = t.id and u.meter = 'requests'
          and u.period_start >= ${month.first}::date::timestamp at time zone 'UTC'
          and u.period_start < ${month.next}::date::timestamp at time zone 'UTC'
      ) as usage_this_month
    from tenants t
    where t.parent_id = ${parentId} and t.id in (select jsonb_array_elements_text(${db.json([...ids])})::uuid)`
  return new Map(
    rows.map((row) => [row.id, { key_count: row.key_count, usage_this_month: Number(row.usage_this_month) }]),
  )
}

/** Sets a parent account's scope ceiling (null: any); false when there is no such parent account. */
/** A parent account's list column that the operator sets from the CLI (events/account-list-changes.ts). */
export type AccountListColumn = 'allowed_scopes' | 'portal_origins'

/** Sets one of a parent account's lists (null: none); false when `accountId` names no parent account. */
export async function setAccountList(
  db: Db,
  accountId: string,
  column: AccountListColumn,
  list: readonly string[] | null,
): Promise<boolean> {
  const value = list === null ? null : db.json([...list])
  const rows = await db`
    update tenants set ${db(column)} = case when ${value}::jsonb is null then null
      else array(select jsonb_array_elements_text(${value}::jsonb)) end, updated_at = now()
    where id = ${accountId} and parent_id is null
    returning id`
  return rows.length === 1
}
