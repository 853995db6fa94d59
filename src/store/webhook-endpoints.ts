// Webhook endpoints of parent accounts (docs/api.md, Webhook endpoints). SQL only; callers pass
// `sql` or a transaction. The secret stays sealed here: only the delivery worker opens it.
import type { Sql, Tx } from './db.js'

type Db = Sql | Tx

export type WebhookEndpointStatus = 'active' | 'disabled' | 'deleted'

export interface WebhookEndpointRow {
  id: string
  account_id: string
  url: string
  event_types: string[]
  description: string | null
  status: WebhookEndpointStatus
  created_at: Date
  disabled_at: Date | null
  disabled_reason: string | null
}

export type WebhookEndpointPageRow = WebhookEndpointRow & { seq: string }

// Arrays cross as JSON: the pool does not fetch array types (store/postgres-options.ts).
const COLUMNS =
  'id, account_id, url, to_jsonb(event_types) as event_types, description, status, created_at, disabled_at, disabled_reason'

export interface NewWebhookEndpoint {
  id: string
  accountId: string
  url: string
  eventTypes: string[]
  description: string | null
  secretSealed: Buffer
}

export async function insertWebhookEndpoint(db: Db, input: NewWebhookEndpoint): Promise<WebhookEndpointRow> {
  const [row] = await db<WebhookEndpointRow[]>`
    insert into webhook_endpoints (id, account_id, url, event_types, description, secret_sealed)
    values (${input.id}, ${input.accountId}, ${input.url}, array(select t from jsonb_array_elements_text(${db.json(input.eventTypes)}) with ordinality as given (t, n) order by n), ${input.description},
            ${input.secretSealed})
    returning ${db.unsafe(COLUMNS)}`
  return row!
}

/**
 * Serializes the parent's endpoint creations until the transaction ends: the cap and the one-URL
 * rule are checked and the row inserted under it, so that concurrent creates cannot both pass.
 */
export async function lockParentEndpoints(tx: Tx, accountId: string): Promise<void> {
  await tx`select pg_advisory_xact_lock(hashtextextended(${`webhook_endpoints:${accountId}`}, 0))`
}

/** The id and URL of each of the parent's endpoints that is not deleted (disabled ones included). */
export function listLiveEndpointUrls(db: Db, accountId: string): Promise<{ id: string; url: string }[]> {
  return db<{ id: string; url: string }[]>`
    select id, url from webhook_endpoints where account_id = ${accountId} and status <> 'deleted'`
}

/** One of the parent's endpoints that is not deleted, or null (unknown, another parent's, deleted). */
export async function getWebhookEndpoint(
  db: Db,
  accountId: string,
  id: string,
  options: { forUpdate?: boolean } = {},
): Promise<WebhookEndpointRow | null> {
  const [row] = await db<WebhookEndpointRow[]>`
    select ${db.unsafe(COLUMNS)} from webhook_endpoints
    where id = ${id} and account_id = ${accountId} and status <> 'deleted'
    ${options.forUpdate ? db`for update` : db``}`
  return row ?? null
}

/**
 * One page of the parent's endpoints that are not deleted, oldest first, by keyset on `seq` (the
 * column, not its text).
 */
export function listWebhookEndpoints(
  db: Db,
  accountId: string,
  page: { limit: number; afterSeq: string | null },
): Promise<WebhookEndpointPageRow[]> {
  return db<WebhookEndpointPageRow[]>`
    select ${db.unsafe(COLUMNS)}, seq::text as seq from webhook_endpoints
    where account_id = ${accountId} and status <> 'deleted'
      ${page.afterSeq === null ? db`` : db`and seq > ${page.afterSeq}`}
    order by webhook_endpoints.seq
    limit ${page.limit}`
}

/** Marks an endpoint deleted and drops its secret: nothing signs for it any more. */
export async function markWebhookEndpointDeleted(db: Db, accountId: string, id: string): Promise<void> {
  await db`
    update webhook_endpoints set status = 'deleted', deleted_at = now(), secret_sealed = null
    where id = ${id} and account_id = ${accountId}`
}

/** What a parent may change of an endpoint (docs/api.md, Webhook endpoints); absent: kept. */
export interface WebhookEndpointChange {
  url?: string
  eventTypes?: string[]
  description?: string | null
  /** `disabled` stops deliveries (their pending ones are cancelled by the caller); `active` resumes them. */
  status?: 'active' | 'disabled'
}

/**
 * Writes `change` to the endpoint and returns it as it now is. A status set to what it was leaves
 * `disabled_at` and the reason as they were; re-enabling clears them and the run of failures, so
 * that five days of failures count from the next one.
 */
export async function updateWebhookEndpoint(
  db: Db,
  accountId: string,
  id: string,
  change: WebhookEndpointChange,
  reason: string,
): Promise<WebhookEndpointRow> {
  const { url, eventTypes, description, status } = change
  const [row] = await db<WebhookEndpointRow[]>`
    update webhook_endpoints set
      url = ${url === undefined ? db`url` : db`${url}`},
      event_types = ${eventTypes === undefined ? db`event_types` : db`array(select t from jsonb_array_elements_text(${db.json(eventTypes)}) with ordinality as given (t, n) order by n)`},
      description = ${description === undefined ? db`description` : db`${description}`},
      ${
        status === 'disabled'
          ? db`disabled_at = coalesce(disabled_at, now()), disabled_reason = coalesce(disabled_reason, ${reason}), status = 'disabled'`
          : status === 'active'
            ? db`disabled_at = null, disabled_reason = null, failing_since = null, status = 'active'`
            : db`status = status`
      }
    where id = ${id} and account_id = ${accountId} and status <> 'deleted'
    returning ${db.unsafe(COLUMNS)}`
  return row!
}
