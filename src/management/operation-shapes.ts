// The shapes the management operations repeat, in one place: an operation's schema wired from its
// document entry (operations.ts) and its parts, the scope its caller must hold, the sub-account of
// its path, and a parent's paged list (docs/api.md, Paging). Each shape gives what an entry of
// its table spells out (operation-table.ts); the routes it makes are those the entry would make.
import type { FastifyContextConfig } from 'fastify'
import type { TSchema } from 'typebox'
import { PageQuery } from '../schemas/common.js'
import { SubAccountParams } from '../schemas/sub-accounts.js'
import type { Sql } from '../store/db.js'
import { type ManagementScope, managementOperation, operation, parentOf } from './common.js'
import type { OPERATIONS } from './operations.js'
import type { CursorScope, PageStart } from './paging.js'

/** An operation's schema parts besides its document entry, in the order the document lists them. */
export interface SchemaParts {
  params?: TSchema
  querystring?: TSchema
  body?: TSchema
  response: Record<number, TSchema>
}

/** The id of an operation's entry in the document (operations.ts). */
export type OperationId = keyof typeof OPERATIONS

/** Config beside the scope: a heavy read (heavy-reads.ts), a store deadline of its own, a streamed body (common.ts). */
export type ExtraConfig = Omit<FastifyContextConfig, 'scope'>

/**
 * `{ schema, config }` of an operation of the parent's account:
 * `schema: { ...operation(id), ...parts }`, `config: { scope, ...config }`.
 */
export function accountOperation<P extends SchemaParts, X extends ExtraConfig = object>(
  scope: ManagementScope,
  id: OperationId,
  parts: P,
  config?: X,
) {
  return { schema: { ...operation(id), ...parts }, config: { scope, ...config } as { scope: ManagementScope } & X }
}

/**
 * The same for an operation under `/:sub_id`: `params` is SubAccountParams unless `parts` names
 * other params (a key's, a grant's), first in the schema either way.
 */
export function subAccountOperation<P extends SchemaParts, X extends ExtraConfig = object>(
  scope: ManagementScope,
  id: OperationId,
  parts: P,
  config?: X,
) {
  return accountOperation(scope, id, { params: SubAccountParams, ...parts }, config)
}

/** A parent-level paged list: the list its cursors are bound to, how to read its rows, how to show one. */
export interface ParentList<Row extends { seq: string }, Item> {
  url: string
  id: OperationId
  list: CursorScope['list']
  response: TSchema
  rows: (sql: Sql, parentId: string, page: PageStart) => Promise<Row[]>
  present: (row: Row) => Item
}

/**
 * `GET url`, scope `sub_accounts:read`, `?limit&cursor` (PageQuery): the parent's rows, oldest
 * first, a cursor bound to the list and the parent; a cursor it did not issue is a 400 before any read.
 */
export function parentListOperation<Row extends { seq: string }, Item>(spec: ParentList<Row, Item>) {
  return managementOperation({
    method: 'GET',
    url: spec.url,
    ...accountOperation('sub_accounts:read', spec.id, { querystring: PageQuery, response: { 200: spec.response } }),
    async handler(request, _reply, { sql, cursors }) {
      const parentId = parentOf(request).id
      const scope = { list: spec.list, owner: parentId }
      return cursors.list(request.query, scope, (start) => spec.rows(sql, parentId, start), spec.present)
    },
  })
}
