// What is sent to a webhook endpoint of the calling parent: a test send, its deliveries (attempts)
// and a delivery's resend (docs/api.md, Webhook endpoints). Apart from the routes of the endpoint
// itself (webhook-endpoint-routes.ts): these concern the events sent to it, not its settings.
import { ApiError } from '../errors.js'
import { markClaim, recordEvent } from '../events/record.js'
import { inTransaction } from '../store/transaction.js'
import { type AttemptPageRow, listAttempts, resendDelivery } from '../store/webhook-deliveries.js'
import { getWebhookEndpoint } from '../store/webhook-endpoints.js'
import { type ManagementContext, managementOperation, notFound, originOf, parentOf, pathUuid } from './common.js'
import type { OperationTable } from './operation-table.js'
import type { PageStart } from './paging.js'
import { accountOperation } from './operation-shapes.js'
import { PageQuery } from '../schemas/common.js'
import { presentWebhookEndpoint } from './webhook-endpoint-changes.js'
import { WEBHOOK_ENDPOINTS_PATH } from './webhook-endpoint-routes.js'
import {
  type DeliveryAttempt,
  DeliveryAttemptPage,
  DeliveryParams,
  DeliveryResent,
  WebhookEndpointParams,
  WebhookTestSent,
} from '../schemas/webhooks.js'

const presentAttempt = (row: AttemptPageRow): DeliveryAttempt => ({
  event_id: row.event_id,
  event_type: row.event_type,
  attempt: row.attempt,
  status: row.status,
  error: row.error,
  duration_ms: row.duration_ms,
  attempted_at: row.attempted_at.toISOString(),
  next_attempt_at: row.next_attempt_at === null ? null : row.next_attempt_at.toISOString(),
})

/** An event id as the gateway makes them (`evt_` and a ULID): anything else names no delivery. */
const EVENT_ID = /^evt_[0-9A-HJKMNP-TV-Z]{26}$/

const endpointDisabled = () =>
  new ApiError('endpoint_disabled', 'the webhook endpoint is disabled: nothing is sent to it any more')

const notFoundEndpoint = () => notFound('webhook endpoint')

/** A test send, a delivery's resend and the deliveries of an endpoint, in the order they are registered. */
export const WEBHOOK_DELIVERY_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: `${WEBHOOK_ENDPOINTS_PATH}/:endpoint_id/test`,
    ...accountOperation('sub_accounts:write', 'sendWebhookTest', {
      params: WebhookEndpointParams,
      response: { 202: WebhookTestSent },
    }),
    async handler(request, reply, { sql }) {
      const id = pathUuid(request.params.endpoint_id, 'webhook endpoint')
      const accountId = parentOf(request).id
      const eventId = await inTransaction(sql, async (tx) => {
        const row = await getWebhookEndpoint(tx, accountId, id, { forUpdate: true })
        if (row === null) throw notFoundEndpoint()
        if (row.status !== 'active') throw endpointDisabled()
        return recordEvent(
          tx,
          originOf(request),
          {
            accountId,
            type: 'webhook_endpoint.test',
            target: { type: 'webhook_endpoint', id },
            object: presentWebhookEndpoint(row),
            previous: null,
          },
          id,
        )
      })
      return reply.code(202).send({ event_id: eventId, type: 'webhook_endpoint.test' as const })
    },
  }),

  managementOperation({
    method: 'POST',
    url: `${WEBHOOK_ENDPOINTS_PATH}/:endpoint_id/deliveries/:event_id/retry`,
    ...accountOperation('sub_accounts:write', 'retryWebhookDelivery', {
      params: DeliveryParams,
      response: { 202: DeliveryResent },
    }),
    async handler(request, reply, { sql }) {
      const id = pathUuid(request.params.endpoint_id, 'webhook endpoint')
      const eventId = request.params.event_id
      const accountId = parentOf(request).id
      const resent = await inTransaction(sql, async (tx) => {
        const row = await getWebhookEndpoint(tx, accountId, id, { forUpdate: true })
        if (row === null) throw notFoundEndpoint()
        if (!EVENT_ID.test(eventId)) throw notFound('delivery')
        if (row.status !== 'active') throw endpointDisabled()
        const done = await resendDelivery(tx, id, eventId, new Date())
        if (done === null) throw notFound('delivery')
        await markClaim(tx, originOf(request), { type: 'webhook_endpoint', id })
        return done
      })
      return reply.code(202).send({
        event_id: eventId,
        attempt: resent.attempt,
        next_attempt_at: resent.nextAttemptAt.toISOString(),
        queued: resent.queued,
      })
    },
  }),

  managementOperation({
    method: 'GET',
    url: `${WEBHOOK_ENDPOINTS_PATH}/:endpoint_id/deliveries`,
    ...accountOperation('sub_accounts:read', 'listWebhookDeliveries', {
      params: WebhookEndpointParams,
      querystring: PageQuery,
      response: { 200: DeliveryAttemptPage },
    }),
    async handler(request, _reply, { sql, cursors }) {
      const id = pathUuid(request.params.endpoint_id, 'webhook endpoint')
      const scope = { list: 'webhook-deliveries', owner: `${parentOf(request).id}/${id}` } as const
      // Newest first: the cursor's position is the one to read before.
      const attempts = async ({ limit, afterSeq }: PageStart) => {
        if ((await getWebhookEndpoint(sql, parentOf(request).id, id)) === null) throw notFoundEndpoint()
        return listAttempts(sql, id, { limit, beforeSeq: afterSeq })
      }
      return cursors.list(request.query, scope, attempts, presentAttempt)
    },
  }),
]
