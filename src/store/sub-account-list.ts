// The sub-accounts list of a parent: filters, sorts, the search by any word of a name, and the
// way each search is read (by the ids of few matches, a window, the order, or a walk). SQL only.
import type { Sql, Tx } from './db.js'
import { Statement } from './statement.js'
import { COLUMNS, type SubAccountSort, type TenantPageRow } from './tenants.js'
import type { TenantStatus } from '../shared/tenancy-records.js'

type Db = Sql | Tx

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
