// A sub-account's API keys: list, mint (key-mint-form.tsx), roll (asked first), revoke, each
// key's requests. A new key and its client secret are shown once, in a dialog; closing it drops
// them from the page. Two keys may share a name (a roll keeps it): every control names its key by
// name and prefix. The console calls the management API for them; the sub-account portal
// (portal/screens.tsx) calls its own, through the same screen (KeyManager), with only what its
// session may do.
import { useEffect, useMemo, useState } from 'preact/hooks'
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
import { CardTable } from './list-table.js'
import { type MintClient, MintForm } from './key-mint-form.js'
import { requestsHash } from './request-filters.js'
import type { ApiKey, KeyPolicy, MintedKey } from './types.js'

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
export interface KeysClient extends MintClient {
  list(cursor: string | null): Promise<Page<ApiKey>>
  roll(keyId: string, overlapSeconds: number): Promise<MintedKey>
  revoke(keyId: string): Promise<unknown>
  /** The address of a key's requests, or null where the page has none to show. */
  requestsOf(key: ApiKey): string | null
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
  /** Refusals in a customer's words (the portal), not the API's (the console). Default false. */
  forCustomer?: boolean
}

export function KeyManager({
  client,
  policy,
  canRead = true,
  canWrite = true,
  askBeforeRoll = true,
  title = 'API keys',
  forCustomer = false,
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
    const rolling = async () => minted('Key rolled', await client.roll(key.id, seconds))
    if (askBeforeRoll) change.runIfConfirmed(ask, rolling, 'Key rolled: the new key is shown once')
    else void change.run(rolling, 'Key rolled: the new key is shown once')
  }
  const revoke = (key: ApiKey) =>
    change.runIfConfirmed(
      `Revoke the key ${keyLabel(key)}? It stops working within a second.`,
      async () => {
        await client.revoke(key.id)
        setReload((n) => n + 1)
      },
      'Key revoked',
    )

  return (
    <section class="card" aria-labelledby="keys-title">
      <h2 id="keys-title">{title}</h2>
      {canWrite && (
        <MintForm
          client={client}
          policy={policy}
          forCustomer={forCustomer}
          onMinted={(key) => minted('Key minted', key)}
        />
      )}
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
        <CardTable
          testId="keys"
          caption="API keys"
          columns={['Name', 'Prefix', 'Scopes', 'Allowed from', 'Status', 'Expires', 'Last used', 'Actions']}
        >
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
                    {k.origin === 'imported' && <span class="sub-line">imported</span>}
                    {k.leaked !== null && (
                      <span class="sub-line" data-testid="key-leaked">
                        leaked {formatTime(k.leaked.at)} ({k.leaked.source})
                        {k.leaked.url !== null && <span class="mono"> {k.leaked.url}</span>}
                      </span>
                    )}
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
                        <label for={`overlap-${k.id}`} class="overlap-label">
                          <span class="visually-hidden">Old key of {label} keeps working for</span>
                          <span aria-hidden="true">Old key works for</span>
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
        </CardTable>
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
          <p class="help" data-testid="client-secret-help">
            The client secret lets an application trade the key's id for short-lived access tokens (OAuth 2.0 client
            credentials) and send those instead of the key. Keep it as secret as the key.
          </p>
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
