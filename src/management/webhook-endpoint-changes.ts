// Creating and deleting webhook endpoints with their events (docs/events.md): each change and its
// event commit together or not at all. Neither event carries the secret: the presenter never shows it.
import { randomUUID } from 'node:crypto'
import { seal } from '../encryption/seal.js'
import { type Origin, recordEvent } from '../events/record.js'
import type { Sql } from '../store/db.js'
import { inTransaction } from '../store/transaction.js'
import { cancelPendingDeliveries } from '../store/webhook-deliveries.js'
import {
  getWebhookEndpoint,
  insertWebhookEndpoint,
  markWebhookEndpointDeleted,
  type WebhookEndpointRow,
} from '../store/webhook-endpoints.js'
import { generateWebhookSecret, sealedSecretFor } from '../webhooks/signature.js'
import { admitWebhookEndpoint } from './webhook-endpoint-admission.js'
import type { WebhookEndpoint } from './webhook-schemas.js'

const iso = (date: Date | null) => (date === null ? null : date.toISOString())

export function presentWebhookEndpoint(row: WebhookEndpointRow): WebhookEndpoint {
  return {
    id: row.id,
    url: row.url,
    event_types: row.event_types,
    description: row.description,
    status: row.status === 'disabled' ? 'disabled' : 'active',
    created_at: row.created_at.toISOString(),
    disabled_at: iso(row.disabled_at),
    disabled_reason: row.disabled_reason,
  }
}

export interface WebhookEndpointInput {
  url: string
  eventTypes: string[]
  description: string | null
}

/**
 * The new endpoint and its secret, in the clear for this one answer only. Refused (409) past the
 * parent's `maxEndpoints`, or for a URL it already has (webhook-endpoint-admission.ts).
 */
export function createWebhookEndpointWithEvent(
  sql: Sql,
  origin: Origin,
  encryptionKey: Buffer,
  accountId: string,
  input: WebhookEndpointInput,
  maxEndpoints: number,
): Promise<{ row: WebhookEndpointRow; secret: string }> {
  const id = randomUUID()
  const secret = generateWebhookSecret()
  const secretSealed = seal(encryptionKey, Buffer.from(secret, 'utf8'), sealedSecretFor(id))
  return inTransaction(sql, async (tx) => {
    await admitWebhookEndpoint(tx, accountId, input.url, maxEndpoints)
    const row = await insertWebhookEndpoint(tx, { id, accountId, secretSealed, ...input })
    await recordEvent(tx, origin, {
      accountId,
      type: 'webhook_endpoint.created',
      target: { type: 'webhook_endpoint', id },
      object: presentWebhookEndpoint(row),
      previous: null,
    })
    return { row, secret }
  })
}

/** Deletes the parent's endpoint; false when there is none to delete (unknown, another parent's, deleted). */
export function deleteWebhookEndpointWithEvent(
  sql: Sql,
  origin: Origin,
  accountId: string,
  id: string,
): Promise<boolean> {
  return inTransaction(sql, async (tx) => {
    const before = await getWebhookEndpoint(tx, accountId, id, { forUpdate: true })
    if (before === null) return false
    await markWebhookEndpointDeleted(tx, accountId, id)
    await cancelPendingDeliveries(tx, id)
    const shown = presentWebhookEndpoint(before)
    await recordEvent(tx, origin, {
      accountId,
      type: 'webhook_endpoint.deleted',
      target: { type: 'webhook_endpoint', id },
      object: { ...shown, status: 'deleted' },
      previous: { status: shown.status },
    })
    return true
  })
}
