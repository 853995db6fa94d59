// How the operations on a sub-account's credentials appear in the OpenAPI document (operations.ts):
// its API keys (minted, imported, reported leaked, rolled, revoked), the scopes a key may carry, and
// its portal sessions.
export const KEY_OPERATION_DOCS = {
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
      'An `application/x-ndjson` body, one key a line (at most 100,000 lines and 64 MiB; a line over 64 KiB is `invalid`): ' +
      '`sub_account_id` or ' +
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
  getAccountScopes: {
    summary: "The scopes the parent may grant its sub-accounts' keys",
    description:
      "The operator's scope ceiling for the account (set with the CLI's `accounts scopes`): a key minted or rolled " +
      "for a sub-account must have its scopes within it, and within the sub-account's own `key_policy.allowed_scopes`. " +
      'null: any scope but `sub_accounts:*`.',
    tags: ['api-keys'],
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
} as const
