// A sub-account's API keys: list, mint (with an optional expiry and IP allow-list, held to the
// sub-account's key policy), roll (asked first), revoke, each key's requests. A new key and its
// client secret are shown once, in a dialog; closing it drops them from the page. Two keys may
// share a name (a roll keeps it): every control names its key by name and prefix. The console
// calls the management API for them; the sub-account portal (portal/keys-client.ts) calls its own,
// through the same screen (KeyManager), with only what its session may do.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks'
import { api, type Page, query } from './api.js'
import {
  announce,
  CopyButton,
  Dialog,
  Empty,
  ErrorMessage,
  formatTime,
  Loading,
  Pager,
  SecretField,
  usePager,
  useAction,
} from './components.js'
import { describedBy, errorsByField, FieldErrors, listOf } from './field-errors.js'
import { describeDuration } from './key-policy.js'
import { requestsHash } from './request-filters.js'
import { servedRoutes } from './routes.js'
import { grantableScopes } from './scope-picker.js'
import type { ApiKey, KeyPolicy, MintedKey, MintKeyRequest } from './types.js'

/** How a control names the key it acts on: a roll leaves two keys of one name, never one prefix. */
export function keyLabel(k: { name: string; prefix: string }): string {
  return `${k.name} (${k.prefix}…)`
}

/** How long the old key keeps working after a roll, the first the default (an array: keys in order). */
const OVERLAPS: [seconds: number, text: string][] = [
  [86400, 'a day'],
  [3600, 'an hour'],
  [0, 'no time (revoke now)'],
]

/** An expiry as the list says it: "no expiry" when the key has none. */
export function expiryText(value: string | null): string {
  return value === null ? 'no expiry' : formatTime(value)
}

/** Where a KeyManager reads and changes keys: the management API (the console) or the portal's. */
export interface KeysClient {
  list(cursor: string | null): Promise<Page<ApiKey>>
  mint(body: MintKeyRequest): Promise<MintedKey>
  roll(keyId: string, overlapSeconds: number): Promise<MintedKey>
  revoke(keyId: string): Promise<unknown>
  /** The address of a key's requests, or null where the page has none to show. */
  requestsOf(key: ApiKey): string | null
  /** The account's scope ceiling (null: none); absent where the page cannot read it (the portal). */
  ceiling?(): Promise<string[] | null>
}

export function subAccountKeys(subId: string): KeysClient {
  return {
    list: (cursor) => api<Page<ApiKey>>('GET', `/${subId}/api-keys${query({ limit: 20, cursor })}`),
    mint: (body) => api<MintedKey>('POST', `/${subId}/api-keys`, body),
    roll: (keyId, seconds) =>
      api<MintedKey>('POST', `/${subId}/api-keys/${keyId}/roll`, { expires_in_seconds: seconds }),
    revoke: (keyId) => api('POST', `/${subId}/api-keys/${keyId}/revoke`),
    requestsOf: (key) => requestsHash({ key_id: key.id }),
    ceiling: async () => (await api<{ allowed_scopes: string[] | null }>('GET', '/scopes')).allowed_scopes,
  }
}

export function KeysSection({ subId, policy }: { subId: string; policy: KeyPolicy }) {
  const client = useMemo(() => subAccountKeys(subId), [subId])
  return <KeyManager client={client} policy={policy} />
}

export interface KeyManagerOptions {
  client: KeysClient
  policy: KeyPolicy
  /** The list and each key's actions (false: the mint form only). Default true. */
  canRead?: boolean
  /** Mint, roll and revoke (false: the list only). Default true. */
  canWrite?: boolean
  /** A roll asks first, as a revoke does (the portal's users roll rarely). Default false. */
  askBeforeRoll?: boolean
  /** The section's heading. Default "API keys". */
  title?: string
}

export function KeyManager({
  client,
  policy,
  canRead = true,
  canWrite = true,
  askBeforeRoll = true,
  title = 'API keys',
}: KeyManagerOptions) {
  const [page, setPage] = useState<Page<ApiKey> | null>(null)
  const [shown, setShown] = useState<{ title: string; key: MintedKey } | null>(null)
  const [reload, setReload] = useState(0)
  const [hideRevoked, setHideRevoked] = useState(false)
  const pager = usePager()
  const load = useAction()
  const change = useAction()

  useEffect(() => {
    if (!canRead) return
    load.run(async (current) => {
      const next = await client.list(pager.cursor)
      if (current()) setPage(next)
    })
  }, [client, canRead, pager.cursor, reload])

  const minted = (title: string, key: MintedKey) => {
    setShown({ title, key })
    setReload((n) => n + 1)
  }
  const roll = (key: ApiKey) => {
    const field = document.getElementById(`overlap-${key.id}`) as HTMLSelectElement | null
    const seconds = Number(field?.value ?? 86400)
    const overlap = OVERLAPS.find(([s]) => s === seconds)?.[1] ?? `${seconds} s`
    const ask =
      seconds === 0
        ? `Roll the key ${keyLabel(key)}? A new key replaces it, and the old one stops working at once.`
        : `Roll the key ${keyLabel(key)}? A new key replaces it; the old one keeps working for ${overlap}.`
    if (askBeforeRoll && !confirm(ask)) return
    change.run(
      async () => minted('Key rolled', await client.roll(key.id, seconds)),
      'Key rolled: the new key is shown once',
    )
  }
  const revoke = (key: ApiKey) => {
    if (!confirm(`Revoke the key ${keyLabel(key)}? It stops working within a second.`)) return
    change.run(async () => {
      await client.revoke(key.id)
      setReload((n) => n + 1)
    }, 'Key revoked')
  }

  return (
    <section class="card" aria-labelledby="keys-title">
      <h2 id="keys-title">{title}</h2>
      {canWrite && <MintForm client={client} policy={policy} onMinted={(key) => minted('Key minted', key)} />}
      <ErrorMessage error={change.error} />
      <ErrorMessage error={load.error} />
      {canRead && page === null && load.error === null && <Loading what="keys" />}
      {page !== null && page.data.length === 0 && <Empty>No keys yet.</Empty>}
      {page?.data.some((k) => k.status === 'revoked') && (
        <label class="check">
          <input
            type="checkbox"
            checked={hideRevoked}
            onChange={(e) => setHideRevoked(e.currentTarget.checked)}
            data-testid="hide-revoked"
          />{' '}
          Hide revoked keys
        </label>
      )}
      {page !== null && page.data.length > 0 && (
        <div class="table-wrap">
          <table data-testid="keys" class="cards">
            <caption class="visually-hidden">API keys</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Prefix</th>
                <th scope="col">Scopes</th>
                <th scope="col">Allowed from</th>
                <th scope="col">Status</th>
                <th scope="col">Expires</th>
                <th scope="col">Last used</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {page.data
                .filter((k) => !hideRevoked || k.status !== 'revoked')
                .map((k) => {
                  const label = keyLabel(k)
                  // The key it replaced and the one that replaced it, by prefix when on this page.
                  const replaces = page.data.find((o) => o.id === k.rolled_from)
                  const replacedBy = page.data.find((o) => o.rolled_from === k.id)
                  return (
                    <tr key={k.id} data-key-id={k.id}>
                      <td data-label="Name">{k.name}</td>
                      <td data-label="Prefix" class="mono">
                        {k.prefix}…
                      </td>
                      <td data-label="Scopes" class="mono">
                        {k.scopes.join(' ')}
                      </td>
                      <td data-label="Allowed from" class={k.ip_allowlist === null ? undefined : 'mono'}>
                        {k.ip_allowlist?.join(' ') ?? 'any address'}
                      </td>
                      <td data-label="Status" data-testid="key-status">
                        <span class={`badge ${k.status}`}>{k.status}</span>
                        {k.revoked_at !== null && <span class="sub-line">revoked {formatTime(k.revoked_at)}</span>}
                        {k.rolled_from !== null && (
                          <span class="sub-line">
                            replaces{' '}
                            <span class="mono">{replaces === undefined ? k.rolled_from : `${replaces.prefix}…`}</span>
                          </span>
                        )}
                        {replacedBy !== undefined && (
                          <span class="sub-line">
                            replaced by <span class="mono">{replacedBy.prefix}…</span>
                          </span>
                        )}
                      </td>
                      <td data-label="Expires">{expiryText(k.expires_at)}</td>
                      <td data-label="Last used">{k.last_used_at === null ? 'never' : formatTime(k.last_used_at)}</td>
                      <td data-label="Actions" class="row-actions">
                        {client.requestsOf(k) !== null && (
                          <a href={client.requestsOf(k)!}>
                            Requests<span class="visually-hidden"> of {label}</span>
                          </a>
                        )}
                        {canWrite && k.status === 'active' && (
                          <>
                            <label for={`overlap-${k.id}`} class="visually-hidden">
                              Old key of {label} keeps working for
                            </label>
                            <select id={`overlap-${k.id}`}>
                              {OVERLAPS.map(([value, text]) => (
                                <option key={value} value={value}>
                                  {text}
                                </option>
                              ))}
                            </select>
                            <button type="button" disabled={change.busy} onClick={() => roll(k)}>
                              Roll<span class="visually-hidden"> {label}</span>
                            </button>
                            <button type="button" class="danger" disabled={change.busy} onClick={() => revoke(k)}>
                              Revoke<span class="visually-hidden"> {label}</span>
                            </button>
                          </>
                        )}
                      </td>
                    </tr>
                  )
                })}
            </tbody>
          </table>
        </div>
      )}
      {canRead && page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Keys" />}
      {shown !== null && (
        <Dialog
          title={shown.title}
          onClose={() => {
            setShown(null)
            announce('The key and its client secret are no longer shown')
          }}
        >
          <p>
            Copy the key and its client secret now: they are shown <strong>only this once</strong>.
          </p>
          <SecretField id="secret-key" label="API key" value={shown.key.api_key} />
          <SecretField id="secret-client" label="Client secret" value={shown.key.client_secret} />
          <p class="help">
            Key id <span class="mono">{shown.key.id}</span> <CopyButton value={shown.key.id} what="the key id" />,{' '}
            {shown.key.expires_at === null ? 'no expiry' : `expires ${formatTime(shown.key.expires_at)}`}, usable from{' '}
            {shown.key.ip_allowlist === null ? (
              'any address'
            ) : (
              <span class="mono">{shown.key.ip_allowlist.join(' ')}</span>
            )}
            .
          </p>
        </Dialog>
      )}
    </section>
  )
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
function useCeiling(client: KeysClient): string[] | null | undefined {
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

/** A datetime-local field's value (the user's local time) for an instant, to the minute. */
function localField(ms: number): string {
  const d = new Date(ms)
  const pad = (n: number) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`
}

/**
 * The form shows the policy's bounds and the account's scope ceiling beside the fields they bound,
 * and offers the scopes within both (scope-picker.ts); the API holds a mint to them, and its
 * refusals are shown beside the field they name. A scope the picker does not list can be typed.
 */
function MintForm({
  client,
  policy,
  onMinted,
}: {
  client: KeysClient
  policy: KeyPolicy
  onMinted: (key: MintedKey) => void
}) {
  const action = useAction()
  const sent = useRef<Record<string, string[]>>({})
  const errors = errorsByField(action.error, '/body', MINT_SUBJECTS, sent.current)
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
      // datetime-local is the user's local time; the API takes an instant with a zone.
      ...(expires === '' ? {} : { expires_at: new Date(expires).toISOString() }),
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
          placeholder={policy.allowed_scopes?.join(' ') ?? 'tracking:read tracking:write'}
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
          Press the scopes offered below, or type any other scope the key needs.
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
        <label for="mint-expires">Expires at ({maxTtl === null ? 'optional' : 'required'}, your local time)</label>
        <input
          id="mint-expires"
          name="expires_at"
          type="datetime-local"
          required={maxTtl !== null}
          defaultValue={latest === null ? '' : localField(latest)}
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
                  if (field !== null) field.value = days === 0 ? '' : localField(Date.now() + days * 86_400_000)
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
      <ErrorMessage error={action.error} />
      <button type="submit" disabled={action.busy}>
        Mint key
      </button>
    </form>
  )
}
