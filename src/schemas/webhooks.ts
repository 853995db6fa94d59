// TypeBox schemas of the webhook endpoint routes (docs/api.md, Webhook endpoints). The response
// schemas are the serializers too: the secret leaves only through CreatedWebhookEndpoint.
import { Type, type Static } from 'typebox'
import { Nullable, Page, STORABLE_TEXT, Timestamp } from './common.js'

export const WEBHOOK_URL_MAX_LENGTH = 2048
export const WEBHOOK_DESCRIPTION_MAX_LENGTH = 500
export const WEBHOOK_EVENT_TYPES_MAX = 50

// The form of a type or `<resource>.*`; whether it names the catalogue is the handler's check.
const EventTypeName = Type.String({
  pattern: '^[a-z_]{1,40}\\.([a-z_]{1,40}|\\*)$',
  description: 'an event type of docs/events.md, or `<resource>.*` for every type of a resource',
})

const Url = Type.String({
  minLength: 1,
  maxLength: WEBHOOK_URL_MAX_LENGTH,
  pattern: STORABLE_TEXT,
  description:
    'https, and never to a special-purpose address (loopback, private, link-local, metadata, and every block IANA marks not globally reachable)',
})
const EventTypes = Type.Array(EventTypeName, { minItems: 1, maxItems: WEBHOOK_EVENT_TYPES_MAX, uniqueItems: true })
const Description = Nullable(Type.String({ maxLength: WEBHOOK_DESCRIPTION_MAX_LENGTH, pattern: STORABLE_TEXT }))

export const CreateWebhookEndpointBody = Type.Object(
  { url: Url, event_types: EventTypes, description: Type.Optional(Description) },
  { additionalProperties: false },
)

// PATCH …/webhook-endpoints/{id}: the fields of creation, each optional, and the status.
export const UpdateWebhookEndpointBody = Type.Object(
  {
    url: Type.Optional(Url),
    event_types: Type.Optional(EventTypes),
    description: Type.Optional(Description),
    status: Type.Optional(
      Type.Union([Type.Literal('active'), Type.Literal('disabled')], {
        description:
          '`disabled`: nothing is sent to it until it is `active` again (its pending deliveries are cancelled); `active` re-enables an endpoint, however it was disabled',
      }),
    ),
  },
  { additionalProperties: false, minProperties: 1 },
)

const EndpointFields = {
  id: Type.String({ format: 'uuid' }),
  url: Type.String(),
  event_types: Type.Array(Type.String()),
  description: Nullable(Type.String()),
  status: Type.Union([Type.Literal('active'), Type.Literal('disabled')], {
    description: '`disabled`: deliveries stopped (the receiver answered 410, or failed for 5 days)',
  }),
  created_at: Timestamp,
  disabled_at: Nullable(Timestamp),
  disabled_reason: Nullable(Type.String()),
}

export const WebhookEndpoint = Type.Object(EndpointFields, { additionalProperties: false })
export type WebhookEndpoint = Static<typeof WebhookEndpoint>

export const CreatedWebhookEndpoint = Type.Object(
  {
    ...EndpointFields,
    secret: Type.String({
      pattern: '^whsec_[A-Za-z0-9+/]{43}=$',
      description: "`whsec_` and base64 of 32 bytes: keys the deliveries' signatures; returned only in this response",
    }),
  },
  { additionalProperties: false },
)

export const WebhookEndpointPage = Page(WebhookEndpoint)

export const DeliveryAttempt = Type.Object(
  {
    event_id: Type.String(),
    event_type: Type.String({ description: "the event's type (docs/events.md)" }),
    attempt: Type.Integer({ minimum: 1, description: '1 for the first attempt at the event, then each retry' }),
    status: Nullable(Type.Integer({ description: "the receiver's HTTP status" })),
    error: Nullable(Type.String({ description: 'why the attempt failed; null for a 2xx' })),
    duration_ms: Type.Integer({ minimum: 0 }),
    attempted_at: Timestamp,
    next_attempt_at: Nullable(Timestamp),
  },
  { additionalProperties: false },
)
export type DeliveryAttempt = Static<typeof DeliveryAttempt>

export const DeliveryAttemptPage = Page(DeliveryAttempt)

// Not validated here: an id that is not a UUID is a 404 (docs/api.md), from the handler.
export const WebhookEndpointParams = Type.Object({ endpoint_id: Type.String() })

export const DeliveryParams = Type.Object({ endpoint_id: Type.String(), event_id: Type.String() })

export const WebhookTestSent = Type.Object(
  {
    event_id: Type.String({ description: 'the `webhook_endpoint.test` event queued for the endpoint' }),
    type: Type.Literal('webhook_endpoint.test'),
  },
  { additionalProperties: false },
)
export type WebhookTestSent = Static<typeof WebhookTestSent>

export const DeliveryResent = Type.Object(
  {
    event_id: Type.String(),
    attempt: Type.Integer({ minimum: 1, description: 'the number of the attempt to come' }),
    next_attempt_at: Timestamp,
    queued: Type.Boolean({
      description: 'false when an attempt at it was already under way: nothing changed, its outcome is listed soon',
    }),
  },
  { additionalProperties: false },
)
export type DeliveryResent = Static<typeof DeliveryResent>
