// Writing an event (docs/events.md): always inside the transaction of the change it records, so
// that an event exists if and only if its change committed. What goes into `data` is built by the
// callers from the API's own presenters, which never show a key, a client secret or a digest.
import { randomUUID } from 'node:crypto'
import type { Sql, Tx } from '../store/db.js'
import { type EventOfStatement, insertEvent } from '../store/events.js'
import { type CommittedTarget, type IdempotencySlot, markIdempotentChange } from '../store/idempotency.js'
import { inTransaction } from '../store/transaction.js'
import { eventId } from './ulid.js'

/** Every type of the catalogue (docs/events.md). */
export const EVENT_TYPES = [
  'sub_account.created',
  'sub_account.updated',
  'sub_account.deactivated',
  'sub_account.reactivated',
  'api_key.created',
  'api_key.rolled',
  'api_key.revoked',
  'api_key.expiring',
  /** A leak reported by secret scanning or by the parent (docs/secret-scanning.md). */
  'api_key.leaked',
  'account.limits_updated',
  'account.scopes_updated',
  'account.portal_origins_updated',
  'account.placement_updated',
  'account.settings_updated',
  'webhook_endpoint.created',
  'webhook_endpoint.updated',
  'webhook_endpoint.deleted',
  'plan.created',
  'plan.updated',
  'plan.deleted',
  'portal_session.created',
  'portal_session.ended',
  /** Prepaid credits (docs/api.md, Credits): a grant made, a grant voided. */
  'credits.granted',
  'credits.voided',
  /** A test send (POST …/webhook-endpoints/{id}/test): delivered to that endpoint only. */
  'webhook_endpoint.test',
  // Alerts: written by the gateway itself (docs/events.md, Alerts).
  'usage.threshold_reached',
  'rate_limit.exceeded',
  'credits.low',
  'credits.exhausted',
  'credits.expired',
] as const

export type EventType = (typeof EVENT_TYPES)[number]

export type TargetType =
  | 'sub_account'
  | 'api_key'
  | 'account'
  | 'webhook_endpoint'
  | 'portal_session'
  | 'plan'
  | 'credit_grant'

export type Actor =
  | { type: 'api_key'; key_id: string }
  | { type: 'operator'; key_id: null }
  /** An alert: the gateway wrote it of its own accord. */
  | { type: 'gateway'; key_id: null }
  /** A change made in the sub-account portal: the session's id (`key_id` null, as for every actor without a key). */
  | { type: 'portal_session'; id: string; key_id: null }

/** Who made a change, and from where: the request, or the operator's command. */
export interface Origin {
  actor: Actor
  requestId: string | null
  sourceIp: string | null
  /**
   * The request's Idempotency-Key claim, which the change marks in its transaction
   * (docs/decisions/0153-a-change-marks-its-claim-in-its-own-transaction.md).
   */
  idempotency?: { slot: IdempotencySlot; claim: string } | null
}

/** The change's Idempotency-Key claim was let go (its request answered 5xx) or taken over: it must not commit. */
export class IdempotencyClaimLostError extends Error {
  constructor() {
    super('the Idempotency-Key claim of this change is gone (answered 5xx, or taken over): rolled back')
    this.name = 'IdempotencyClaimLostError'
  }
}

/**
 * The operator's command line: no key and no address. Each command has a request id of its own,
 * made like the gateway's, so that the events of one command (and only those) share it.
 */
export const operatorOrigin = (requestId: string = randomUUID()): Origin => ({
  actor: { type: 'operator', key_id: null },
  requestId,
  sourceIp: null,
})

/** A change made in the portal (portal/api-routes.ts): the session, the request, the address. */
export const portalOrigin = (sessionId: string, requestId: string, sourceIp: string): Origin => ({
  actor: { type: 'portal_session', id: sessionId, key_id: null },
  requestId,
  sourceIp,
})

/** An alert's origin: no key, no request, no address (docs/events.md, Alerts). */
export const gatewayOrigin: Origin = { actor: { type: 'gateway', key_id: null }, requestId: null, sourceIp: null }

export interface NewEvent {
  /** The parent account whose audit log shows the event. */
  accountId: string
  type: EventType
  target: { type: TargetType; id: string }
  /** The resource after the change, as the API presents it. */
  object: object
  /** The changed fields before the change; null when there was nothing before (a creation). */
  previous: object | null
  /** An alert of a shadow limit (docs/api.md, Shadow limits): `data.shadow` is true. */
  shadow?: true
}

/**
 * Records an event in the transaction of its change: a roll, a new account and its key, account
 * limits, webhook endpoints (docs/decisions/0154-events-are-written-by-the-code-that-makes.md). The
 * changes of sub-accounts and keys write their event in their own statement instead (runChange,
 * below).
 *
 * It marks the request's Idempotency-Key claim, and returns the event's id. `deliverOnlyTo`
 * (a test send) queues it for that endpoint alone, not for every endpoint that subscribes to it.
 */
export async function recordEvent(
  tx: Tx,
  origin: Origin,
  event: NewEvent,
  deliverOnlyTo: string | null = null,
): Promise<string> {
  const id = eventId()
  await insertEvent(
    tx,
    {
      id,
      account_id: event.accountId,
      type: event.type,
      actor: origin.actor,
      target: event.target,
      request_id: origin.requestId,
      source_ip: origin.sourceIp,
      data: {
        object: event.object as Record<string, unknown>,
        previous: event.previous as Record<string, unknown> | null,
        ...(event.shadow === true ? { shadow: true } : {}),
      },
    },
    deliverOnlyTo,
  )
  // Last, so that the claim's row is locked only for the commit: a change under an Idempotency-Key
  // commits if and only if its claim still stands, and its row then says it committed.
  await markClaim(tx, origin, event.target)
  return id
}

/** Marks the request's Idempotency-Key claim in a change's transaction, for a change that writes no event. */
export async function markClaim(tx: Tx, origin: Origin, target: CommittedTarget): Promise<void> {
  const claimed = origin.idempotency
  if (claimed != null && !(await markIdempotentChange(tx, claimed.slot, claimed.claim, target))) {
    throw new IdempotencyClaimLostError()
  }
}

/** What an event written by its change's statement takes from the change's origin. */
export function statementEvent(
  origin: Origin,
  event: { accountId: string; type: EventType } & Pick<EventOfStatement, 'target' | 'object' | 'previous' | 'source'>,
): EventOfStatement {
  return {
    id: eventId(),
    account_id: event.accountId,
    type: event.type,
    actor: origin.actor,
    request_id: origin.requestId,
    source_ip: origin.sourceIp,
    target: event.target,
    object: event.object,
    previous: event.previous,
    source: event.source,
  }
}

/**
 * Runs a change whose statement writes its own event (store/events.ts changeWithEvent): alone,
 * one autocommitted statement, one round trip; under an Idempotency-Key, in a transaction that
 * marks the claim after it, so that the change commits if and only if its claim still stands.
 * `changed` says what the change made or changed, null when it changed nothing (and wrote no event).
 */
export function runChange<T>(
  sql: Sql,
  origin: Origin,
  change: (db: Sql | Tx) => Promise<T>,
  changed: (result: T) => CommittedTarget | null,
): Promise<T> {
  if (origin.idempotency == null) return change(sql)
  return inTransaction(sql, async (tx) => {
    const result = await change(tx)
    const target = changed(result)
    if (target !== null) await markClaim(tx, origin, target)
    return result
  })
}
