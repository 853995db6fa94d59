// Webhook endpoints of the calling parent: create, list, get, change and delete (docs/api.md,
// Webhook endpoints), with the rules of a URL and of event types; what is sent to an endpoint is
// in webhook-delivery-routes.ts. Registered before /:sub_id, though the router prefers the static
// segment anyway.
import { Type } from 'typebox'
import { validationFailed } from '../errors.js'
import { EVENT_TYPES } from '../events/record.js'
import { getWebhookEndpoint, listWebhookEndpoints } from '../store/webhook-endpoints.js'
import { checkWebhookUrl, type UrlPolicyOptions, WebhookUrlError } from '../webhooks/url-policy.js'
import { type ManagementContext, managementOperation, notFound, originOf, parentOf, pathUuid } from './common.js'
import { MANAGEMENT_PREFIX } from '../shared/paths.js'
import { STORE_DEADLINES } from '../store/deadlines.js'
import { outsideStoreDeadline } from './hooks.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation, parentListOperation } from './operation-shapes.js'
import {
  createWebhookEndpointWithEvent,
  deleteWebhookEndpointWithEvent,
  presentWebhookEndpoint,
  updateWebhookEndpointWithEvent,
} from './webhook-endpoint-changes.js'
import {
  CreatedWebhookEndpoint,
  CreateWebhookEndpointBody,
  UpdateWebhookEndpointBody,
  WebhookEndpoint,
  WebhookEndpointPage,
  WebhookEndpointParams,
} from '../schemas/webhooks.js'

export const WEBHOOK_ENDPOINTS_PATH = '/webhook-endpoints'

/** A catalogue type, or `<resource>.*` for a resource the catalogue has (docs/events.md). */
export function isSubscribableEventType(name: string): boolean {
  if (!name.endsWith('.*')) return (EVENT_TYPES as readonly string[]).includes(name)
  const prefix = name.slice(0, -1)
  return EVENT_TYPES.some((type) => type.startsWith(prefix))
}

/**
 * How long the URL's name may take to resolve: as long as a management call's store work. Past it
 * the URL is refused (400, as a name that does not resolve), before anything is written.
 */
export const WEBHOOK_LOOKUP_TIMEOUT_MS = STORE_DEADLINES.managementMs

/** Said of a refusal the gateway's operator could lift: a receiver on a developer's machine. */
const INSECURE_HINT =
  'for local development, the gateway accepts such URLs when started with WEBHOOKS_ALLOW_INSECURE=true'

/**
 * The URL rules (webhooks/url-policy.ts); a refusal is a 400 that names the field and says why.
 * The message never names an address the host resolved to (url-policy.ts says why).
 */
async function checkUrl(raw: string, options: UrlPolicyOptions): Promise<void> {
  try {
    await checkWebhookUrl(raw, { ...options, lookupTimeoutMs: WEBHOOK_LOOKUP_TIMEOUT_MS })
  } catch (err) {
    if (!(err instanceof WebhookUrlError)) throw err
    const message = err.insecureWouldAllow ? `${err.message}; ${INSECURE_HINT}` : err.message
    throw validationFailed([{ path: '/body/url', message }])
  }
}

const notFoundEndpoint = () => notFound('webhook endpoint')

/** A 400 naming the first event type that is neither a catalogue type nor `<resource>.*`. */
function checkEventTypes(types: readonly string[]): void {
  const unknown = types.findIndex((name) => !isSubscribableEventType(name))
  if (unknown !== -1) {
    throw validationFailed([
      { path: `/body/event_types/${unknown}`, message: 'is not an event type or <resource>.* (docs/events.md)' },
    ])
  }
}

/** The webhook endpoints' create, list, get, change and delete, in the order they are registered. */
export const WEBHOOK_ENDPOINT_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: WEBHOOK_ENDPOINTS_PATH,
    ...accountOperation('sub_accounts:write', 'createWebhookEndpoint', {
      body: CreateWebhookEndpointBody,
      response: { 201: CreatedWebhookEndpoint },
    }),
    async handler(request, reply, { sql, webhooks }) {
      const { body } = request
      checkEventTypes(body.event_types)
      // The resolver's wait is bounded on its own and is not store work (management/hooks.ts).
      await outsideStoreDeadline(request, reply, () =>
        checkUrl(body.url, { allowInsecure: webhooks.allowInsecure, lookup: webhooks.lookup }),
      )
      const { row, secret } = await createWebhookEndpointWithEvent(
        sql,
        originOf(request),
        webhooks.encryptionKey,
        parentOf(request).id,
        { url: body.url, eventTypes: body.event_types, description: body.description ?? null },
        webhooks.endpointsMax,
      )
      // The secret is in this response only: nothing on the way may keep a copy.
      return reply
        .code(201)
        .header('location', `${MANAGEMENT_PREFIX}${WEBHOOK_ENDPOINTS_PATH}/${row.id}`)
        .header('cache-control', 'no-store')
        .send({ ...presentWebhookEndpoint(row), secret })
    },
  }),

  parentListOperation({
    url: WEBHOOK_ENDPOINTS_PATH,
    id: 'listWebhookEndpoints',
    list: 'webhook-endpoints',
    response: WebhookEndpointPage,
    rows: listWebhookEndpoints,
    present: presentWebhookEndpoint,
  }),

  managementOperation({
    method: 'GET',
    url: `${WEBHOOK_ENDPOINTS_PATH}/:endpoint_id`,
    ...accountOperation('sub_accounts:read', 'getWebhookEndpoint', {
      params: WebhookEndpointParams,
      response: { 200: WebhookEndpoint },
    }),
    async handler(request, _reply, { sql }) {
      const id = pathUuid(request.params.endpoint_id, 'webhook endpoint')
      const row = await getWebhookEndpoint(sql, parentOf(request).id, id)
      if (row === null) throw notFoundEndpoint()
      return presentWebhookEndpoint(row)
    },
  }),

  managementOperation({
    method: 'PATCH',
    url: `${WEBHOOK_ENDPOINTS_PATH}/:endpoint_id`,
    ...accountOperation('sub_accounts:write', 'updateWebhookEndpoint', {
      params: WebhookEndpointParams,
      body: UpdateWebhookEndpointBody,
      response: { 200: WebhookEndpoint },
    }),
    async handler(request, reply, { sql, webhooks }) {
      const id = pathUuid(request.params.endpoint_id, 'webhook endpoint')
      const { body } = request
      if (body.event_types !== undefined) checkEventTypes(body.event_types)
      // The URL rules of creation, the resolver's wait outside the store deadline as there.
      if (body.url !== undefined) {
        const url = body.url
        await outsideStoreDeadline(request, reply, () =>
          checkUrl(url, { allowInsecure: webhooks.allowInsecure, lookup: webhooks.lookup }),
        )
      }
      const row = await updateWebhookEndpointWithEvent(sql, originOf(request), parentOf(request).id, id, {
        ...(body.url === undefined ? {} : { url: body.url }),
        ...(body.event_types === undefined ? {} : { eventTypes: body.event_types }),
        ...(body.description === undefined ? {} : { description: body.description }),
        ...(body.status === undefined ? {} : { status: body.status }),
      })
      if (row === null) throw notFoundEndpoint()
      return presentWebhookEndpoint(row)
    },
  }),

  managementOperation({
    method: 'DELETE',
    url: `${WEBHOOK_ENDPOINTS_PATH}/:endpoint_id`,
    ...accountOperation('sub_accounts:write', 'deleteWebhookEndpoint', {
      params: WebhookEndpointParams,
      response: { 204: Type.Null({ description: 'Deleted; no body' }) },
    }),
    async handler(request, reply, { sql }) {
      const id = pathUuid(request.params.endpoint_id, 'webhook endpoint')
      const deleted = await deleteWebhookEndpointWithEvent(sql, originOf(request), parentOf(request).id, id)
      if (!deleted) throw notFoundEndpoint()
      return reply.code(204).send(null)
    },
  }),
]
