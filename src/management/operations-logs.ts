// How the operations on what an account is told appear in the OpenAPI document (operations.ts): the
// audit log, the request log, and the webhook endpoints with their deliveries.
export const LOG_OPERATION_DOCS = {
  listEvents: {
    summary: "The audit log: the parent's events, newest first",
    description:
      'Every change made through this API or the operator CLI, written in the transaction of the change ' +
      '(docs/events.md). `type` is an event type or `<resource>.*`; `since` (inclusive) and `until` (exclusive) ' +
      'are RFC 3339; `target_id` is the id of the changed resource; `sub_account_id` gives the events of a ' +
      'sub-account, its keys and its portal sessions; `expand=actor` names each actor (a key: its name, prefix ' +
      'and sub-account; a portal session: its sub-account). Kept EVENTS_RETENTION_DAYS (default 90).',
    tags: ['events'],
  },
  getEvent: {
    summary: "One of the parent's events",
    description:
      'The event as the audit log lists it, and as a webhook delivery carries it in `data`. An id that is unknown, ' +
      "another parent's, or of an event past EVENTS_RETENTION_DAYS: 404 not_found.",
    tags: ['events'],
  },
  listRequests: {
    summary: "The request log: the parent's answered requests, newest first",
    description:
      'Every request answered after its key was known: proxied, refused by a rule, or a management call, by ' +
      'the parent and its sub-accounts. Never headers, bodies, query strings or secrets. `status` is a status ' +
      '(`404`) or a class (`4xx`); `sub_account_id` is the tenant the request acted as; `since` (inclusive) and ' +
      '`until` (exclusive) are RFC 3339. Records are written in batches, about a second after the answer, and ' +
      'kept REQUEST_LOG_RETENTION_DAYS (default 7; 0: no log, every list empty). A parent reads its log two ' +
      "calls at a time on each replica (its sub-accounts' portal lists are counted apart): a third is 429 " +
      'too_many_concurrent_requests, Retry-After: 1.',
    tags: ['requests'],
  },
  getRequest: {
    summary: 'One record of the request log, by its request id (X-Request-Id)',
    description: "Counted with the lists among the parent's two reads of its log at a time (429 past them).",
    tags: ['requests'],
  },
  createWebhookEndpoint: {
    summary: 'Create a webhook endpoint',
    description:
      "`secret` (`whsec_` and base64 of 32 bytes, which keys the deliveries' Standard Webhooks signatures) is in " +
      'this response only (Cache-Control: no-store); it is kept encrypted under ENCRYPTION_KEY. `url` is https and ' +
      'never a special-purpose address (loopback, private, link-local, metadata, and every block IANA marks not ' +
      "globally reachable), its name's addresses included (unless " +
      'WEBHOOKS_ALLOW_INSECURE). `event_types`: event types of docs/events.md or `<resource>.*`. At most ' +
      'WEBHOOK_ENDPOINTS_MAX (default 20) endpoints a parent (`409 limit_reached`), and each URL once ' +
      '(`409 url_conflict`).',
    tags: ['webhooks'],
  },
  listWebhookEndpoints: {
    summary: "List the parent's webhook endpoints, oldest first, without secrets",
    tags: ['webhooks'],
  },
  getWebhookEndpoint: { summary: 'Get a webhook endpoint, without its secret', tags: ['webhooks'] },
  updateWebhookEndpoint: {
    summary: 'Change a webhook endpoint',
    description:
      'Any of `url`, `event_types` and `description` (null clears it), under the rules of creation (an https URL ' +
      'to no special-purpose address, unless WEBHOOKS_ALLOW_INSECURE; each URL once, `409 url_conflict`), and ' +
      '`status`: `disabled` stops deliveries (the pending ones are cancelled), `active` re-enables the endpoint, ' +
      'however it was disabled. The secret is kept. Writes `webhook_endpoint.updated` with the changed fields as ' +
      'they were; a change to what is already there writes none. An empty body or an unknown field: 400.',
    tags: ['webhooks'],
  },
  deleteWebhookEndpoint: {
    summary: 'Delete a webhook endpoint',
    description: 'Answers 204; nothing is delivered to it any more. A deleted endpoint is then 404 not_found.',
    tags: ['webhooks'],
  },
  listWebhookDeliveries: {
    summary: "An endpoint's delivery attempts, newest first",
    description:
      'Each attempt at an event: the HTTP status (null when none came), why it failed (null for a 2xx), how long ' +
      'it took, and when the next attempt is due (null when none will be made). Retries follow the schedule of ' +
      'docs/events.md; a 410 or five days of failures disable the endpoint.',
    tags: ['webhooks'],
  },
  sendWebhookTest: {
    summary: 'Send a test event to an endpoint',
    description:
      'Writes a `webhook_endpoint.test` event (its object: the endpoint) and queues its delivery to this endpoint ' +
      'only, whatever the endpoint subscribes to: signed and retried like any delivery, and listed with its ' +
      'deliveries. `409 endpoint_disabled` for a disabled endpoint.',
    tags: ['webhooks'],
  },
  retryWebhookDelivery: {
    summary: "Send an event to an endpoint again (a delivery's resend)",
    description:
      "The endpoint's delivery of that event is due at once: a delivered, given-up or cancelled one gets one more " +
      'attempt (numbered after the last); a pending one is brought forward. While an attempt is under way nothing ' +
      'changes (`queued: false`). `404` for an event the endpoint has no delivery of; `409 endpoint_disabled` for a ' +
      'disabled endpoint. Writes no event.',
    tags: ['webhooks'],
  },
} as const
