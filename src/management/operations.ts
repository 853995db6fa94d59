// The summaries and descriptions of the management operations, kept apart from their handlers.
/** How each operation appears in the OpenAPI document (src/ops/openapi.ts); the router ignores these fields. */
export const OPERATIONS = {
  createSubAccount: {
    summary: 'Create a sub-account',
    description: "Answers 201 with a Location header. `external_id` is unique among the parent's sub-accounts.",
    tags: ['sub-accounts'],
  },
  listSubAccounts: {
    summary: 'List sub-accounts, oldest first',
    description:
      '`sort` orders the list (`created_at`, the default, oldest first; `-created_at`; `name`; `-name`); a cursor ' +
      'pages the sort and filters it came from (another sort: 400 naming the sort it belongs to). `include` adds ' +
      'figures to each sub-account: `key_count` (keys neither revoked nor expired), `usage_this_month` (this UTC ' +
      "month's request units: forwarded requests at their routes' cost, what a monthly quota counts). Without " +
      '`include` the objects are as before.',
    tags: ['sub-accounts'],
  },
  getSubAccount: {
    summary: 'Get a sub-account',
    description: '`include` adds `key_count` and `usage_this_month`, as on the list.',
    tags: ['sub-accounts'],
  },
  updateSubAccount: {
    summary: 'Update a sub-account',
    description:
      'Only the fields given change; `external_id: null` clears it. `limits` is replaced as a whole (a member ' +
      'left out is null; `limits: null` clears both). An empty body is refused.',
    tags: ['sub-accounts'],
  },
  deactivateSubAccount: {
    summary: 'Deactivate a sub-account',
    description: 'Its keys are refused, and it cannot be acted as, until it is reactivated. Repeating is harmless.',
    tags: ['sub-accounts'],
  },
  reactivateSubAccount: {
    summary: 'Reactivate a sub-account',
    description: 'Repeating is harmless.',
    tags: ['sub-accounts'],
  },
  createPlan: {
    summary: 'Create a plan',
    description:
      'A plan holds limits and a key policy, of the shapes a sub-account has, for the sub-accounts that name it ' +
      "(`plan_id`) or, without one, for all of them when it is the account's `default_plan_id`. Answers 201 with a " +
      'Location header.',
    tags: ['plans'],
  },
  listPlans: { summary: 'List plans, oldest first', tags: ['plans'] },
  getPlan: { summary: 'Get a plan', tags: ['plans'] },
  updatePlan: {
    summary: 'Update a plan',
    description:
      "Only the fields given change; `limits` and `key_policy` are replaced as a whole, as a sub-account's. Every " +
      'replica enforces the change for all of its sub-accounts within about a second. An empty body is refused.',
    tags: ['plans'],
  },
  deletePlan: {
    summary: 'Delete a plan',
    description:
      "409 plan_in_use while a sub-account's `plan_id` or the account's `default_plan_id` names it; nothing is changed then.",
    tags: ['plans'],
  },
  getAccountSettings: {
    summary: "The account's settings: its default plan and its leak policy",
    tags: ['sub-accounts'],
  },
  updateAccountSettings: {
    summary: "Change the account's settings",
    description:
      "Any of: `default_plan_id`, one of the account's plans, the plan of every sub-account without a `plan_id` " +
      "(null: none); `leak_policy`, what a leaked key of the account comes to when GitHub's secret scanning or the " +
      'account reports it: `revoke` (the default) or `alert` (an `api_key.leaked` event only). Members left out ' +
      'keep their value; a change writes one `account.settings_updated` event.',
    tags: ['sub-accounts'],
  },
  createApiKey: {
    summary: 'Create an API key for a sub-account',
    description:
      '`api_key` and `client_secret` are in this response only (Cache-Control: no-store). ' +
      'A sub-account key may not carry `sub_accounts:*` scopes. With `expires_at` it is refused ' +
      '(401 key_expired) from that instant on.',
    tags: ['api-keys'],
  },
  importApiKeys: {
    summary: 'Import API keys from elsewhere',
    description:
      'An `application/x-ndjson` body, one key a line (at most 100,000 lines and 64 MiB): `sub_account_id` or ' +
      '`external_id`, `name`, `scopes`, `expires_at`?, and `key` (its value, hashed at once, never stored) or ' +
      '`key_sha256` (its SHA-256, hex or base64). The answer streams a line per input line, ' +
      '`{"line", "status": "imported" | "exists" | "invalid", "key_id"?, "error"?}`, then `{"summary"}`. ' +
      'A key this account has already is `exists`: importing a file again imports nothing twice. ' +
      '`dry_run=true` checks every line and writes nothing. An imported key authenticates, expires, rolls and ' +
      'revokes as a minted one, in its own format.',
    tags: ['api-keys'],
  },
  reportLeakedKey: {
    summary: 'Report a leaked key of the account',
    description:
      '`{"key"}`: a key of the account (its own or a sub-account\'s) found where it should not be. A live key gets ' +
      "the account's `leak_policy` at once (`revoke`: refused on every replica within about a second; `alert`: " +
      'marked only), an `api_key.leaked` event, and `leaked` on its record; the answer is the key as it now is. ' +
      'Reporting it again changes nothing. A value that is no key of the account: 404.',
    tags: ['api-keys'],
  },
  listApiKeys: { summary: "List a sub-account's API keys, without their secrets", tags: ['api-keys'] },
  getApiKey: { summary: 'Get an API key of a sub-account, without its secrets', tags: ['api-keys'] },
  revokeApiKey: {
    summary: 'Revoke an API key of a sub-account',
    description: 'Every replica refuses the key within about a second. Repeating is harmless.',
    tags: ['api-keys'],
  },
  rollApiKey: {
    summary: 'Roll an API key: a new key, and the old one kept for an overlap',
    description:
      "The new key has the old one's name, scopes and `expires_at`, and `rolled_from` naming it; `api_key` and " +
      '`client_secret` are in this response only (Cache-Control: no-store), `Location` names it. The old key ' +
      'now expires at the earlier of its own `expires_at` and now + `expires_in_seconds` (default 86400, at ' +
      'most 2592000); 0 revokes it at once. The body may be absent. A revoked or expired key: 409 key_not_active.',
    tags: ['api-keys'],
  },
  getUsage: {
    summary: 'Report requests per sub-account and day',
    description:
      '`from` and `to` are UTC dates (YYYY-MM-DD), both inclusive and at most 366 days apart; by default the ' +
      'first day of the current month and today. Lists the sub-accounts with usage in the range, each with ' +
      'its 429s of a rate limit and of a monthly quota in `limited` (and its `name` with include=name).',
    tags: ['usage'],
  },
  simulateLimits: {
    summary: 'Simulate limits over the request log: whom they would have refused, how often and when',
    description:
      "Replays the range's requests of the caller's sub-accounts (or one) that reached the limits, forwarded or " +
      'refused by one, in the order they arrived, through the limiter itself: the same token bucket, the same ' +
      "calendar-month quota (counting the month's use before `from`), the same debts of units. Each sub-account " +
      "is under `limits` alone (a rate starts full at the range's start). The request log must hold the range; " +
      'at most 10^7 of its records are read.',
    tags: ['limits'],
  },
  reconcileUsage: {
    summary: 'Reconcile usage: the meter beside the limiter, the request log and the export',
    description:
      '`from` and `to` as for the export (period boundaries; by default this UTC month so far). One entry per ' +
      "sub-account (or the parent itself) and meter with use: the usage meter's units, what limits charged " +
      "(null under no limit), the request log's count of forwarded requests (null once the log no longer holds " +
      'the range) and what was exported (acknowledged by the push receiver, or closed with no push), with each ' +
      'difference from the meter explained by its `kind` (`late`, `log_dropped`, `open_period`, `log_expired`, ' +
      '`not_exported`, `not_limited`, `replica_lost`) or flagged `unexplained`.',
    tags: ['usage'],
  },
  exportUsage: {
    summary: 'Export the closed usage periods: a record per period, sub-account and meter',
    description:
      '`from` and `to` are RFC 3339 date-times at the start of a usage period (an hour by default), `from` ' +
      'inclusive, `to` exclusive; by default the start of this UTC month and the end of the period under way. ' +
      "Streams the units of the closed periods in the range, of the parent's own " +
      "use and its sub-accounts', oldest period first: `format=ndjson` (the default) a CloudEvent 1.0 a line, " +
      "with an id that is the same however often it is exported; `format=csv` the events' data with a header row. " +
      'A range that reaches past the closed periods is cut where they end, which `X-Usage-Closed-Until` says ' +
      '(absent while no period has closed). A closed period never changes: units flushed for it later count in ' +
      'the first open period, marked `late`.',
    tags: ['usage'],
  },
  getSubAccountKeyUsage: {
    summary: "A sub-account's usage by key",
    description:
      '`from` and `to` as in the usage report (UTC dates, inclusive, at most 366 days; by default this month so ' +
      'far). Each key that made requests acting as the sub-account in the range, oldest key first: its own keys ' +
      "(`owner: sub_account`) and its parent's keys acting as it (`owner: parent`), with their requests by status " +
      'class and by day. Counted by key from the version that added this route on; earlier days have no keys.',
    tags: ['usage'],
  },
  getAccountLimits: {
    summary: "The parent's account limits and this month's use",
    description:
      "`used` counts this UTC month's request units (forwarded requests at their routes' cost) for the parent and all its sub-accounts " +
      '(refusals left out), as Postgres has them: at most about 2 s behind. The account limits are set by the operator.',
    tags: ['limits'],
  },
  getAccountScopes: {
    summary: "The scopes the parent may grant its sub-accounts' keys",
    description:
      "The operator's scope ceiling for the account (set with the CLI's `accounts scopes`): a key minted or rolled " +
      "for a sub-account must have its scopes within it, and within the sub-account's own `key_policy.allowed_scopes`. " +
      'null: any scope but `sub_accounts:*`.',
    tags: ['api-keys'],
  },
  listRoutes: {
    summary: "List the routes the gateway proxies, with their targets' state",
    description:
      'Each route of the route table: the scopes a key needs there, whether it carries WebSockets, the origins whose ' +
      'pages may call it from a browser, and, on a route with several targets, each target (by its place, never its ' +
      'address) up, ejected by passive health or failing its active checks, and whether the route is in panic (every ' +
      'target out, requests sent to all). The same for every parent; the state is that of the replica that answers.',
    tags: ['routes'],
  },
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
  createPortalSession: {
    summary: "Open a portal session for a sub-account's people",
    description:
      '`url` (`<ISSUER_URL>/portal/#<one-time token>`) is in this response only (Cache-Control: ' +
      'no-store): the page it opens exchanges the token once for a session bound to this sub-account and ' +
      '`permissions`, until `expires_at` (`expires_in_seconds`, 60 to 3600, default 900). A deactivated ' +
      'sub-account: 400; at most 50 open sessions a sub-account (`409 limit_reached`). Served with the console ' +
      '(CONSOLE=on).',
    tags: ['portal'],
  },
  listPortalSessions: {
    summary: "A sub-account's open portal sessions, newest first",
    description: 'Sessions not ended and not expired (at most 50), without their links.',
    tags: ['portal'],
  },
  deletePortalSession: {
    summary: 'End a portal session',
    description:
      'Answers 204; the session is refused from now on, on every replica. Ending one that has already ended ' +
      '(deleted, expired, or its sub-account deactivated) answers 204 too.',
    tags: ['portal'],
  },
  createCreditGrant: {
    summary: 'Grant prepaid credits of a meter to a sub-account',
    description:
      'Answers 201 with a Location header. `meter` is a route meter (never `requests`); `units` 1 to 10^12; ' +
      '`expires_at`, in the future, is when what is left of the grant is gone; `priority` 0 to 1000 (default 100). ' +
      'Use burns grants in order of priority (lower first), then soonest expiry, then oldest. Writes credits.granted.',
    tags: ['credits'],
  },
  getCredits: {
    summary: "A sub-account's credit balances and grants",
    description:
      "`balances`: each meter's units left in live grants (every meter with a grant or a credit limit); `grants`: " +
      'the live ones first in the order use burns them, then voided and expired ones, newest first.',
    tags: ['credits'],
  },
  getCreditHistory: {
    summary: "A sub-account's credits over time",
    description:
      '`from` and `to` as in the usage report (UTC dates, inclusive, at most 366 days; by default this month so ' +
      'far). For each meter with a grant or a credit limit, the units left in its live grants, point by point: ' +
      "`start` (at `from`), each grant made, each usage period's burns (at the period's end, or now for the open " +
      'one; several periods summed when the range holds more than 1,000), what was left of a grant at its expiry ' +
      'or void, and `end`. `owed_units`: what is owed now, beyond every grant (not in the points).',
    tags: ['credits'],
  },
  voidCreditGrant: {
    summary: 'Void a credit grant',
    description:
      'What is left of it is gone at once (`units_left` 0, `voided_at` set); writes credits.voided. Repeating is harmless.',
    tags: ['credits'],
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
} as const satisfies Record<string, { summary: string; description?: string; tags: readonly string[] }>
