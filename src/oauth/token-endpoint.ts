// POST /oauth2/token (docs/credentials.md): the client credentials grant (RFC 6749 §4.4). A
// sub-account key's id and client secret buy a short-lived access token (RFC 9068), so that the
// long-lived secret travels once per token instead of on every request. Its own scope: a form
// parser, RFC 6749 errors instead of problem+json, the body and store deadlines of the
// management API, and its own kind in the metrics and the request line.
import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto'
import type { FastifyPluginAsync } from 'fastify'
import { ACCESS_TOKEN_TYPE } from '../auth/access-tokens.js'
import { digest } from '../auth/key-format.js'
import { SCOPE_PATTERN, scopeCovers, uniqueScopes } from '../shared/scopes.js'
import { continueAfterChecks } from '../http/expect-continue.js'
import { singleHeaderCounts } from '../http/header-counts.js'
import { addManagementDeadline } from '../management/hooks.js'
import type { Tally } from '../shared/fast-metrics.js'
import type { Sql } from '../store/db.js'
import type { ClientCredential } from '../store/api-keys.js'
import { storeDeadlinesOf } from '../store/deadlines.js'
import { UUID_PATTERN } from '../shared/identifiers.js'
import { presentedClient, type PresentedClient } from './client-credentials.js'
import { ClientLookups } from './client-lookups.js'
import { FailedClientAttempts } from './client-lockout.js'
import type { Keyring } from '../signing-keys/keyring.js'
import { ipRefusal } from '../guardrails/caller-address.js'
import { invalidClient, invalidRequest, invalidScope, noStore, OAuthError, sendOAuthError } from './errors.js'
import { TOKEN_PATH } from '../shared/paths.js'
import { acceptFormsOnly, FORM_TYPE, quoted, TOKEN_BODY_LIMIT, type TokenForm } from './token-form.js'
import { tokenEndpointSchema } from './token-schemas.js'

export interface TokenEndpointOptions {
  sql: Sql
  keyring: Keyring
  /** `iss` and `aud` of the tokens (ISSUER_URL). */
  issuerUrl: string
  /** ACCESS_TOKEN_TTL_SECONDS. */
  ttlSeconds: number
  /** Counts each token signed. */
  signatures: Tally
  /** Counts each paced query for client ids, and the ids it asked for. */
  clientLookupCounts?: { query(): void; clientIds(n: number): void }
  /** How long a body may take to arrive (the management API's, MANAGEMENT_BODY_TIMEOUT_MS by default). */
  bodyTimeoutMs?: number
}

const GRANT_TYPE = 'client_credentials'
const KEY_ID = new RegExp(UUID_PATTERN)
const SCOPE_NAME = new RegExp(SCOPE_PATTERN)

/** RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/

/**
 * Compared with when there is no stored digest (an unknown key, a key without a secret), so that
 * every failure does the same work as a wrong secret. Random: it matches nothing.
 */
const UNMATCHABLE = randomBytes(32)

/**
 * The key behind a client id and secret, or 401 invalid_client: one answer, and the same work (a
 * query, a digest, a constant-time comparison) for an unknown key, a wrong or missing secret, a
 * key without one, a revoked or expired key and a deactivated sub-account.
 */
async function authenticateClient(clients: ClientLookups, client: PresentedClient): Promise<ClientCredential> {
  // Key ids are UUIDs, as everyone knows: anything else is no key, and Postgres would refuse it.
  const row = KEY_ID.test(client.id) ? await clients.find(client.id) : null
  const stored = row?.secret_digest ?? null
  const expected = stored !== null && stored.length === UNMATCHABLE.length ? stored : UNMATCHABLE
  const matches = timingSafeEqual(digest(client.secret ?? ''), expected) && expected !== UNMATCHABLE
  if (
    !matches ||
    row === null ||
    client.secret === null ||
    row.status !== 'active' ||
    (row.expires_at !== null && row.expires_at.getTime() <= Date.now()) ||
    row.tenant_status !== 'active'
  )
    throw invalidClient()
  return row
}

/**
 * The scopes a token carries: those asked for, each covered by one of the key's (a key's
 * `tracking:*` covers `tracking:read`), or all the key's when none are asked for.
 */
export function grantedScopes(requested: string | undefined, keyScopes: readonly string[]): string[] {
  // RFC 6749 §3.2: a parameter without a value is one not sent.
  if (requested === undefined || requested === '') return [...keyScopes]
  const asked = requested.split(' ')
  if (asked.some((scope) => !SCOPE_TOKEN.test(scope)))
    throw invalidScope('scope must be scope names separated by single spaces')
  // A key's wildcard covers any suffix; what the token carries must still be a scope name.
  const unnamed = asked.filter((scope) => !SCOPE_NAME.test(scope))
  if (unnamed.length > 0)
    throw invalidScope(`${unnamed.slice(0, 5).map(quoted).join(', ')} is not a scope name (e.g. orders:read)`)
  const beyond = asked.filter((scope) => !keyScopes.some((granted) => scopeCovers(granted, scope)))
  if (beyond.length > 0) throw invalidScope(`the key does not hold ${beyond.slice(0, 5).map(quoted).join(', ')}`)
  return uniqueScopes(asked)
}

function requireGrantType(form: TokenForm): void {
  const grantType = form.grant_type
  if (grantType === undefined || grantType === '') throw invalidRequest('grant_type is missing')
  if (grantType !== GRANT_TYPE)
    throw new OAuthError(400, 'unsupported_grant_type', `grant_type must be ${GRANT_TYPE}, not ${quoted(grantType)}`)
}

/** 403 unauthorized_client when the key's or its tenant's IP allow-list leaves out `ip`. */
function refuseByAddress(key: ClientCredential, ip: string): void {
  const refusal = ipRefusal(
    { id: key.id, tenantId: key.tenant_id, scopes: key.scopes, status: key.status, ipAllowlist: key.ip_allowlist },
    {
      id: key.tenant_id,
      parentId: key.parent_id,
      externalId: null,
      status: key.tenant_status,
      keyIpAllowlist: key.tenant_ip_allowlist,
    },
    ip,
  )
  if (refusal !== undefined) throw new OAuthError(403, 'unauthorized_client', `ip_not_allowed: ${refusal.detail}`)
}

/** The access token of `key` with `scope` (RFC 9068), signed by the keyring's current key. */
function signAccessToken(
  keyring: Keyring,
  issuerUrl: string,
  key: ClientCredential,
  scope: string,
  ttlSeconds: number,
) {
  return keyring.sign(
    {
      iss: issuerUrl,
      aud: issuerUrl,
      sub: key.id,
      client_id: key.id,
      tenant_id: key.tenant_id,
      parent_id: key.parent_id,
      scope,
      jti: randomUUID(),
    },
    { typ: ACCESS_TOKEN_TYPE, ttlSeconds },
  )
}

export const tokenEndpoint: FastifyPluginAsync<TokenEndpointOptions> = async (scope, options) => {
  const { sql, keyring, issuerUrl, ttlSeconds, signatures } = options
  acceptFormsOnly(scope)
  scope.setErrorHandler(sendOAuthError)
  // A token request waits on Postgres and on its body only: both are bounded as a management call's are.
  addManagementDeadline(scope, options.bodyTimeoutMs)
  scope.addHook('onRequest', continueAfterChecks(TOKEN_BODY_LIMIT))
  const attempts = new FailedClientAttempts()
  const counts = options.clientLookupCounts
  const { lookupMs, lookupIntervalMs } = storeDeadlinesOf(scope)
  const clients = new ClientLookups(sql, {
    deadlineMs: lookupMs,
    pacing: { intervalMs: lookupIntervalMs },
    onQuery: (n) => {
      counts?.query()
      counts?.clientIds(n)
    },
  })

  scope.post(
    TOKEN_PATH,
    // The schema describes the form for the OpenAPI document; the handler checks it itself, in
    // RFC 6749's words (a wrong grant_type is unsupported_grant_type, not a validation error).
    { schema: tokenEndpointSchema, attachValidation: true, config: { kind: 'token' } },
    async (request, reply) => {
      // RFC 6749 §2.3.1: a secret never goes in the URL, where logs and proxies keep it.
      const query = request.url.indexOf('?')
      if (query !== -1 && query < request.url.length - 1)
        throw invalidRequest('send the parameters in the body, not in the URL')
      const form = request.body as TokenForm | undefined
      if (form === undefined || Object.keys(form).length === 0)
        throw invalidRequest(`the body is empty: send grant_type=${GRANT_TYPE} as ${FORM_TYPE}`)
      const client = presentedClient(request.headers.authorization, singleHeaderCounts(request).authorization, form)
      attempts.refuseIfLocked(client.id, request.ip)
      requireGrantType(form)
      const key = await attempts.attempt(client.id, request.ip, () => authenticateClient(clients, client))
      // Only once the client proved it holds the secret: an allow-list is not told to strangers.
      refuseByAddress(key, request.ip)
      const scopes = grantedScopes(form.scope, key.scopes)
      const scope = scopes.join(' ')
      const signed = await signAccessToken(keyring, issuerUrl, key, scope, ttlSeconds)
      signatures.inc()
      return noStore(reply).send({
        access_token: signed.token,
        token_type: 'Bearer',
        expires_in: ttlSeconds,
        scope,
      })
    },
  )
}
