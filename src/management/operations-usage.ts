// How the operations on what an account uses appear in the OpenAPI document (operations.ts): usage
// (reports, reconciliation, export, by key), limits and their simulation, prepaid credits, and the
// proxied routes.
export const USAGE_OPERATION_DOCS = {
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
  listRoutes: {
    summary: "List the routes the gateway proxies, with their targets' state",
    description:
      'Each route of the route table: the scopes a key needs there, whether it carries WebSockets, the origins whose ' +
      'pages may call it from a browser, and, on a route with several targets, each target (by its place, never its ' +
      'address) up, ejected by passive health or failing its active checks, and whether the route is in panic (every ' +
      'target out, requests sent to all). The same for every parent; the state is that of the replica that answers.',
    tags: ['routes'],
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
} as const
