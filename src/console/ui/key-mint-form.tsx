// The form that mints a sub-account's key, in the console and the portal (keys.tsx's KeyManager):
// the fields bounded by the key policy and the account's scope ceiling, the scopes offered within
// both, and the API's refusals shown beside the field they name.
import { useEffect, useRef, useState } from 'preact/hooks'
import { problemOfError } from './api.js'
import { ErrorMessage, formatTime, useAction } from './components.js'
import { describedBy, errorsByField, type FieldErrorMap, FieldErrors, listOf } from './field-errors.js'
import { describeDuration } from './key-policy.js'
import { fromUtcField, toUtcField } from './request-filters.js'
import { servedRoutes } from './routes.js'
import { grantableScopes } from './scope-picker.js'
import type { KeyPolicy, MintedKey, MintKeyRequest } from './types.js'

/** Where the form mints: the management API or the portal's (keys.tsx's KeysClient has the rest). */
export interface MintClient {
  mint(body: MintKeyRequest): Promise<MintedKey>
  /** The account's scope ceiling (null: none); absent where the page cannot read it (the portal). */
  ceiling?(): Promise<string[] | null>
}

const MINT_SUBJECTS = {
  name: 'The name',
  scopes: 'The scopes',
  expires_at: 'Expires at',
  ip_allowlist: 'The IP allow-list',
}

/** The scopes the gateway's routes ask for (the page's route list). */
function routeScopes(): string[] {
  return servedRoutes().flatMap((r) => (r.public ? [] : [...r.scopes.read, ...r.scopes.write]))
}

/**
 * The account's scope ceiling, read once the form is shown: undefined while it is read or where it
 * cannot be (the portal: the mint is held to it all the same), null when the account has none.
 */
function useCeiling(client: MintClient): string[] | null | undefined {
  const [ceiling, setCeiling] = useState<string[] | null | undefined>(undefined)
  useEffect(() => {
    let live = true
    // A failed read leaves the picker unbound by the ceiling: the mint's refusal says the rest.
    client
      .ceiling?.()
      .then((read) => live && setCeiling(read))
      .catch(() => {})
    return () => {
      live = false
    }
  }, [client])
  return ceiling
}

/** The expiry field's shortcuts: a label and days from now (0: no expiry), within the policy's bound. */
const EXPIRY_PRESETS: [label: string, days: number][] = [
  ['In 7 days', 7],
  ['In 30 days', 30],
  ['In 90 days', 90],
  ['In a year', 365],
  ['No expiry', 0],
]

/** Every reason of a refusal is shown beside a field of the form (else the alert says it whole). */
function allAtFields(error: unknown): boolean {
  const reasons = problemOfError(error).errors ?? []
  return (
    reasons.length > 0 &&
    reasons.every(({ path }) => path.startsWith('/body/') && Object.hasOwn(MINT_SUBJECTS, path.split('/')[2] ?? ''))
  )
}

/**
 * The API's reasons (written for developers: `key_policy.max_ttl_seconds (2592000)`) in words a
 * customer reads: the key policy and the provider's bounds named as such, a lifetime in days.
 */
export function inCustomerWords(errors: FieldErrorMap, policy: KeyPolicy): FieldErrorMap {
  const words = new Map<string, string[]>()
  for (const [field, messages] of errors)
    words.set(
      field,
      messages.map((message) => {
        if (field === 'expires_at' && policy.max_ttl_seconds !== null) {
          const latest = new Date(Date.now() + policy.max_ttl_seconds * 1000).toISOString()
          return `Your keys may live at most ${describeDuration(policy.max_ttl_seconds)}: choose an expiry before ${formatTime(latest)}.`
        }
        return message
          .replace(
            / is outside the sub-account's key_policy\.allowed_scopes \(([^)]*)\)/,
            ' is not a scope your keys may have (they may have $1)',
          )
          .replace(
            / is outside the scopes the operator allows this account \(([^)]*)\)/,
            ' is not a scope your provider allows (it allows $1)',
          )
      }),
    )
  return words
}

/** A datetime-local field's value for an instant, in UTC as every time the pages show, to the minute. */
function utcField(ms: number): string {
  return toUtcField(new Date(Math.floor(ms / 60_000) * 60_000).toISOString()).slice(0, 16)
}

/**
 * The form shows the policy's bounds and the account's scope ceiling beside the fields they bound,
 * and offers the scopes within both (scope-picker.ts); the API holds a mint to them, and its
 * refusals are shown beside the field they name. A scope the picker does not list can be typed.
 */
export function MintForm({
  client,
  policy,
  onMinted,
  forCustomer = false,
}: {
  client: MintClient
  policy: KeyPolicy
  onMinted: (key: MintedKey) => void
  /** Refusals in words a customer reads (the portal): the fields' reasons, and one line above the button. */
  forCustomer?: boolean
}) {
  const action = useAction()
  const sent = useRef<Record<string, string[]>>({})
  const apiErrors = errorsByField(action.error, '/body', MINT_SUBJECTS, sent.current)
  const errors = forCustomer ? inCustomerWords(apiErrors, policy) : apiErrors
  // The scopes field's text, so that the route scopes offered beside it show which it holds.
  const [scopesText, setScopesText] = useState('')
  const chosen = listOf(scopesText) ?? []
  const ceiling = useCeiling(client)
  const offered = grantableScopes(routeScopes(), ceiling ?? null, policy.allowed_scopes)
  // What bounds the offer, said above it (with no bound it is the routes' scopes).
  const bounds = [
    ceiling != null && "the account's scope ceiling",
    policy.allowed_scopes !== null && 'the key policy',
  ].filter((bound) => bound !== false)
  const toggleScope = (scope: string) =>
    setScopesText((chosen.includes(scope) ? chosen.filter((s) => s !== scope) : [...chosen, scope]).join(' '))
  const maxTtl = policy.max_ttl_seconds
  // The latest expiry the policy allows, to the minute below it: still within it when submitted.
  const latest = maxTtl === null ? null : Math.floor((Date.now() + maxTtl * 1000) / 60_000) * 60_000
  // The shortcuts the policy allows: none longer than its longest life, and no "No expiry" under one.
  const presets = EXPIRY_PRESETS.filter(([, days]) =>
    days === 0 ? maxTtl === null : maxTtl === null || days * 86_400 <= maxTtl,
  )
  const submit = (e: Event) => {
    e.preventDefault()
    const formElement = e.currentTarget as HTMLFormElement
    const form = new FormData(formElement)
    const scopes = listOf(String(form.get('scopes') ?? '')) ?? []
    const ipAllowlist = listOf(String(form.get('ip_allowlist') ?? ''))
    const expires = String(form.get('expires_at') ?? '')
    sent.current = { scopes, ip_allowlist: ipAllowlist ?? [] }
    const body: MintKeyRequest = {
      name: String(form.get('name') ?? ''),
      scopes,
      // The field is read as UTC, as every time the pages show; the API takes an instant with a zone.
      ...(expires === '' ? {} : { expires_at: fromUtcField(expires) }),
      ...(ipAllowlist === null ? {} : { ip_allowlist: ipAllowlist }),
    }
    action.run(async () => {
      const key = await client.mint(body)
      formElement.reset()
      setScopesText('')
      onMinted(key)
    }, 'Key minted: it is shown once')
  }
  return (
    <form class="mint" onSubmit={submit} aria-labelledby="mint-title">
      <h3 id="mint-title">Mint a key</h3>
      <div class="field">
        <label for="mint-name">Name</label>
        <input
          id="mint-name"
          name="name"
          required
          maxLength={200}
          aria-invalid={errors.has('name') || undefined}
          aria-describedby={describedBy(errors.has('name') && 'mint-name-error')}
        />
        <FieldErrors id="mint-name-error" messages={errors.get('name')} />
      </div>
      <div class="field">
        <label for="mint-scopes">Scopes (space or comma separated)</label>
        <input
          id="mint-scopes"
          name="scopes"
          required
          class="mono"
          placeholder={offered.slice(0, 2).join(' ') || undefined}
          value={scopesText}
          onInput={(e) => setScopesText(e.currentTarget.value)}
          aria-invalid={errors.has('scopes') || undefined}
          aria-describedby={describedBy(
            'mint-scopes-typed',
            policy.allowed_scopes !== null && 'mint-scopes-help',
            ceiling != null && 'mint-scopes-ceiling',
            errors.has('scopes') && 'mint-scopes-error',
          )}
        />
        <span id="mint-scopes-typed" class="help hint">
          {offered.length > 0
            ? 'Press the scopes offered below, or type any other scope the key needs.'
            : 'Type the scopes the key needs, such as orders:read (your provider names them).'}
        </span>
        {policy.allowed_scopes !== null && (
          <span id="mint-scopes-help" class="help hint" data-testid="mint-scopes-help">
            The key policy allows only <span class="mono">{policy.allowed_scopes.join(' ')}</span> (a pattern such as
            tracking:* allows every tracking: scope).
          </span>
        )}
        {ceiling != null && (
          <span id="mint-scopes-ceiling" class="help hint" data-testid="mint-scopes-ceiling">
            The account's scope ceiling (set by the gateway's operator) allows only{' '}
            <span class="mono">{ceiling.join(' ')}</span>.
          </span>
        )}
        {offered.length > 0 && (
          <div class="presets" data-testid="scope-picker">
            <span class="help">
              {bounds.length === 0
                ? "The routes' scopes:"
                : `The scopes this key may be given, within ${bounds.join(' and ')}:`}
            </span>
            {offered.map((scope) => (
              <button
                key={scope}
                type="button"
                class="secondary small mono"
                aria-pressed={chosen.includes(scope)}
                onClick={() => toggleScope(scope)}
              >
                {scope}
              </button>
            ))}
          </div>
        )}
        <FieldErrors id="mint-scopes-error" messages={errors.get('scopes')} />
      </div>
      <div class="field">
        <label for="mint-expires">Expires at ({maxTtl === null ? 'optional' : 'required'}, UTC)</label>
        <input
          id="mint-expires"
          name="expires_at"
          type="datetime-local"
          required={maxTtl !== null}
          defaultValue={latest === null ? '' : utcField(latest)}
          aria-invalid={errors.has('expires_at') || undefined}
          aria-describedby={describedBy(
            maxTtl !== null && 'mint-expires-help',
            errors.has('expires_at') && 'mint-expires-error',
          )}
        />
        {maxTtl !== null && latest !== null && (
          <span id="mint-expires-help" class="help hint" data-testid="mint-expires-help">
            The key policy lets a key live at most {describeDuration(maxTtl)}: by{' '}
            {formatTime(new Date(latest).toISOString())} at the latest, the time filled in.
          </span>
        )}
        {presets.length > 0 && (
          <div class="presets">
            {presets.map(([label, days]) => (
              <button
                key={label}
                type="button"
                class="secondary small"
                onClick={() => {
                  const field = document.getElementById('mint-expires') as HTMLInputElement | null
                  if (field !== null) field.value = days === 0 ? '' : utcField(Date.now() + days * 86_400_000)
                }}
              >
                {label}
              </button>
            ))}
          </div>
        )}
        <FieldErrors id="mint-expires-error" messages={errors.get('expires_at')} />
      </div>
      <div class="field">
        <label for="mint-ips">IP allow-list (optional)</label>
        <textarea
          id="mint-ips"
          name="ip_allowlist"
          rows={2}
          class="mono"
          placeholder={'203.0.113.0/24\n2001:db8::/48'}
          aria-invalid={errors.has('ip_allowlist') || undefined}
          aria-describedby={describedBy('mint-ips-help', errors.has('ip_allowlist') && 'mint-ips-error')}
        />
        <span id="mint-ips-help" class="help hint">
          One address or CIDR a line, or comma separated; empty: any address.
          {policy.ip_allowlist !== null && (
            <>
              {' '}
              The key policy allows only <span class="mono">{policy.ip_allowlist.join(' ')}</span>: a request must come
              from an address both lists allow.
            </>
          )}
        </span>
        <FieldErrors id="mint-ips-error" messages={errors.get('ip_allowlist')} />
      </div>
      {forCustomer && errors.size > 0 && allAtFields(action.error) ? (
        <p class="error" role="alert" data-testid="mint-refused">
          The key was not minted: {errors.size === 1 ? 'the field marked above says' : 'the fields marked above say'}{' '}
          why.
        </p>
      ) : (
        <ErrorMessage error={action.error} />
      )}
      <button type="submit" disabled={action.busy}>
        Mint key
      </button>
    </form>
  )
}
