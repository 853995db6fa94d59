// Writing an event (docs/events.md): always inside the transaction of the change it records, so
// that an event exists if and only if its change committed. What goes into `data` is built by the
// callers from the API's own presenters, which never show a key, a client secret or a digest.
import { randomUUID } from 'node:crypto'
import type { Tx } from '../store/db.js'
import { insertEvent } from '../store/events.js'
import { type IdempotencySlot, markIdempotentChange } from '../store/idempotency.js'
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
  'account.limits_updated',
  'webhook_endpoint.created',
  'webhook_endpoint.deleted',
] as const

export type EventType = (typeof EVENT_TYPES)[number]

export type TargetType = 'sub_account' | 'api_key' | 'account' | 'webhook_endpoint'

export type Actor = { type: 'api_key'; key_id: string } | { type: 'operator'; key_id: null }

/** Who made a change, and from where: the request, or the operator's command. */
export interface Origin {
  actor: Actor
  requestId: string | null
  sourceIp: string | null
  /** The request's Idempotency-Key claim, which the change marks in its transaction (docs/decisions.md). */
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

export interface NewEvent {
  /** The parent account whose audit log shows the event. */
  accountId: string
  type: EventType
  target: { type: TargetType; id: string }
  /** The resource after the change, as the API presents it. */
  object: object
  /** The changed fields before the change; null when there was nothing before (a creation). */
  previous: object | null
}

export async function recordEvent(tx: Tx, origin: Origin, event: NewEvent): Promise<void> {
  await insertEvent(tx, {
    id: eventId(),
    account_id: event.accountId,
    type: event.type,
    actor: origin.actor,
    target: event.target,
    request_id: origin.requestId,
    source_ip: origin.sourceIp,
    data: {
      object: event.object as Record<string, unknown>,
      previous: event.previous as Record<string, unknown> | null,
    },
  })
  // Last, so that the claim's row is locked only for the commit: a change under an Idempotency-Key
  // commits if and only if its claim still stands, and its row then says it committed.
  const claimed = origin.idempotency
  if (claimed != null && !(await markIdempotentChange(tx, claimed.slot, claimed.claim, event.target))) {
    throw new IdempotencyClaimLostError()
  }
}
