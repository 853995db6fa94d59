// Creating, changing and deleting webhook endpoints with their events (docs/events.md): each change
// and its event commit together or not at all. Neither event carries the secret: the presenter never shows it.
import { randomUUID } from 'node:crypto'
import { seal } from '../encryption/seal.js'
import { markClaim, type Origin, recordEvent } from '../events/record.js'
import type { Sql } from '../store/db.js'
import { inTransaction } from '../store/transaction.js'
import { cancelPendingDeliveries } from '../store/webhook-deliveries.js'
import {
  getWebhookEndpoint,
  insertWebhookEndpoint,
  markWebhookEndpointDeleted,
  updateWebhookEndpoint,
  type WebhookEndpointChange,
  type WebhookEndpointRow,
} from '../store/webhook-endpoints.js'
import { generateWebhookSecret, sealedSecretFor } from '../webhooks/signature.js'
import { admitUrlChange, admitWebhookEndpoint } from './webhook-endpoint-admission.js'
import type { WebhookEndpoint } from '../schemas/webhooks.js'

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

/** Why an endpoint its parent disabled is disabled (`disabled_reason`). */
export const DISABLED_BY_PARENT = 'disabled by its parent'

/**
 * Changes the parent's endpoint and writes `webhook_endpoint.updated` with the fields that changed
 * as they were; null when there is none to change (unknown, another parent's, deleted). A change
 * to what is already there writes no event, as every repeat. Disabling cancels the pending
 * deliveries, as the worker's own disabling does; enabling again queues the events to come, not
 * those missed meanwhile.
 */
export function updateWebhookEndpointWithEvent(
  sql: Sql,
  origin: Origin,
  accountId: string,
  id: string,
  change: WebhookEndpointChange,
): Promise<WebhookEndpointRow | null> {
  return inTransaction(sql, async (tx) => {
    const before = await getWebhookEndpoint(tx, accountId, id, { forUpdate: true })
    if (before === null) return null
    const shown = presentWebhookEndpoint(before)
    const previous: Record<string, unknown> = {}
    const effective: WebhookEndpointChange = {}
    if (change.url !== undefined && change.url !== before.url) {
      previous.url = before.url
      effective.url = change.url
    }
    if (change.eventTypes !== undefined && JSON.stringify(change.eventTypes) !== JSON.stringify(before.event_types)) {
      previous.event_types = before.event_types
      effective.eventTypes = change.eventTypes
    }
    if (change.description !== undefined && change.description !== before.description) {
      previous.description = before.description
      effective.description = change.description
    }
    if (change.status !== undefined && change.status !== shown.status) {
      previous.status = shown.status
      previous.disabled_at = shown.disabled_at
      previous.disabled_reason = shown.disabled_reason
      effective.status = change.status
    }
    if (Object.keys(effective).length === 0) {
      await markClaim(tx, origin, { type: 'webhook_endpoint', id })
      return before
    }
    if (effective.url !== undefined) await admitUrlChange(tx, accountId, id, effective.url)
    const after = await updateWebhookEndpoint(tx, accountId, id, effective, DISABLED_BY_PARENT)
    if (effective.status === 'disabled') await cancelPendingDeliveries(tx, id)
    await recordEvent(tx, origin, {
      accountId,
      type: 'webhook_endpoint.updated',
      target: { type: 'webhook_endpoint', id },
      object: presentWebhookEndpoint(after),
      previous,
    })
    return after
  })
}
