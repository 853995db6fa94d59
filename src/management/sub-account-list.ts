// The sub-accounts list's order and figures (docs/api.md, Sub-accounts: `sort`, `include`): which
// cursor a sort pages with, why a cursor of another sort is refused, and the figures added to
// each row on request. The route itself is in sub-account-routes.ts.
import { validationFailed } from '../errors.js'
import { monthOf } from '../limits/month.js'
import { monthDays } from '../limits/store.js'
import type { Sql } from '../store/db.js'
import { SUB_ACCOUNT_SORTS, type SubAccountSort, subAccountFigures } from '../store/tenants.js'
import type { CursorScope, Cursors } from './paging.js'
import type { SubAccount, SubAccountInclude, SubAccountWithFigures } from '../schemas/sub-accounts.js'

const DEFAULT_SORT: SubAccountSort = 'created_at'

/**
 * The cursor scope of one list: the parent, its filters and its sort. The default sort adds
 * nothing, so that the cursors made before there were sorts still page the same list.
 */
export function listScope(owner: string, sort: SubAccountSort): CursorScope {
  return { list: 'sub-accounts', owner: sort === DEFAULT_SORT ? owner : `${owner}#sort=${sort}` }
}

/** Whether a sort pages by (lower(name), seq): its cursors carry the last name. */
export const sortsByName = (sort: SubAccountSort): boolean => sort.endsWith('name')

/**
 * Where a page starts: the position (and, by name, the name) the cursor names. A cursor made
 * under another sort would start the page at a place that means nothing in this order: it is
 * refused saying which sort it belongs to; any other cursor not issued for this list, as before.
 */
export async function listStart(
  cursors: Cursors,
  cursor: string | undefined,
  owner: string,
  sort: SubAccountSort,
): Promise<{ afterSeq: string | null; afterSortKey: string | null }> {
  if (cursor === undefined) return { afterSeq: null, afterSortKey: null }
  const scope = listScope(owner, sort)
  try {
    if (sortsByName(sort)) {
      const start = await cursors.decodeKeyed(cursor, scope)
      return { afterSeq: start!.seq, afterSortKey: start!.sortKey }
    }
    return { afterSeq: await cursors.decode(cursor, scope), afterSortKey: null }
  } catch (err) {
    for (const other of SUB_ACCOUNT_SORTS) {
      if (other === sort || !(await cursors.issuedFor(cursor, listScope(owner, other)))) continue
      throw validationFailed([
        {
          path: '/querystring/cursor',
          message:
            `pages the list with sort=${other}, not sort=${sort}: ` +
            `send sort=${other} with this cursor, or leave the cursor out to start the list sorted by ${sort}`,
        },
      ])
    }
    throw err
  }
}

/** The figures `include` names, once each (the schema has checked the words). */
export function parseInclude(include: string | undefined): SubAccountInclude[] {
  if (include === undefined) return []
  return [...new Set(include.split(',') as SubAccountInclude[])]
}

/** The sub-accounts with the figures asked for added (none asked: the same objects, no query). */
export async function withFigures(
  sql: Sql,
  parentId: string,
  subAccounts: SubAccount[],
  include: readonly SubAccountInclude[],
  nowMs = Date.now(),
): Promise<SubAccountWithFigures[]> {
  if (include.length === 0 || subAccounts.length === 0) return subAccounts
  const figures = await subAccountFigures(
    sql,
    parentId,
    subAccounts.map((s) => s.id),
    monthDays(monthOf(nowMs)),
  )
  return subAccounts.map((s) => {
    const found = figures.get(s.id) ?? { key_count: 0, usage_this_month: 0 }
    const added: SubAccountWithFigures = { ...s }
    for (const name of include) added[name] = found[name]
    return added
  })
}
