// GitHub's secret scanning public keys (docs/secret-scanning.md), by which a partner checks that a
// report comes from GitHub: fetched from SECRET_SCANNING_KEYS_URL, kept an hour, and fetched again
// at most once a minute for an identifier they do not hold (GitHub rotates its keys). The report's
// signature is ECDSA P-256 over SHA-256 of its body, DER-encoded and base64'd, checked by node:crypto.
import { createPublicKey, type KeyObject, verify } from 'node:crypto'
import { request } from 'undici'
import { ApiError } from '../errors.js'

/** How long fetched keys serve before they are fetched again. */
export const KEYS_TTL_MS = 3_600_000
/** The least time between two fetches for an unknown identifier. */
export const REFETCH_MIN_MS = 60_000
/** A fetch gives up after this long. */
const FETCH_TIMEOUT_MS = 5_000
/** The keys document is small (GitHub's is about 1 KiB a key). */
const MAX_DOCUMENT_BYTES = 1024 * 1024

export interface GitHubKeysOptions {
  url: string
  /** The document's JSON; default a GET of `url` with undici. */
  fetchDocument?: (url: string) => Promise<unknown>
  now?: () => number
  /** Told each fetch (the tests count them). */
  onFetch?: () => void
}

async function getJson(url: string): Promise<unknown> {
  const res = await request(url, {
    method: 'GET',
    headers: { accept: 'application/json', 'user-agent': 'tenancy-gateway' },
    headersTimeout: FETCH_TIMEOUT_MS,
    bodyTimeout: FETCH_TIMEOUT_MS,
    // Asked at most once a minute: no connection is kept for the next time, nor past the app's close.
    reset: true,
  })
  const declared = Number(res.headers['content-length'] ?? 0)
  if (res.statusCode !== 200 || declared > MAX_DOCUMENT_BYTES) {
    res.body.resume()
    throw new Error(`${url} answered ${res.statusCode}`)
  }
  const text = await res.body.text()
  if (text.length > MAX_DOCUMENT_BYTES) throw new Error(`${url} answered more than ${MAX_DOCUMENT_BYTES} bytes`)
  return JSON.parse(text)
}

/** The keys of a `{"public_keys": [{"key_identifier", "key"}]}` document; keys that do not parse are left out. */
export function keysOf(document: unknown): Map<string, KeyObject> {
  const keys = new Map<string, KeyObject>()
  const list = (document as { public_keys?: unknown } | null)?.public_keys
  if (!Array.isArray(list)) return keys
  for (const entry of list as { key_identifier?: unknown; key?: unknown }[]) {
    if (typeof entry?.key_identifier !== 'string' || typeof entry.key !== 'string') continue
    try {
      const key = createPublicKey(entry.key)
      if (key.asymmetricKeyType === 'ec') keys.set(entry.key_identifier, key)
    } catch {
      // A key in a format node cannot read is not one a report could be checked with: left out.
    }
  }
  return keys
}

export class GitHubKeys {
  private keys = new Map<string, KeyObject>()
  /** When the keys were fetched; -Infinity: never. */
  private fetchedAt = Number.NEGATIVE_INFINITY
  private fetching: Promise<void> | null = null
  private readonly options: GitHubKeysOptions
  private readonly now: () => number

  constructor(options: GitHubKeysOptions) {
    this.options = options
    this.now = options.now ?? Date.now
  }

  /** One fetch at a time; callers during it share it. */
  private refresh(): Promise<void> {
    this.fetching ??= (async () => {
      this.options.onFetch?.()
      // Counted from the attempt: a failing URL is asked at most once a minute too.
      this.fetchedAt = this.now()
      try {
        this.keys = keysOf(await (this.options.fetchDocument ?? getJson)(this.options.url))
      } finally {
        this.fetching = null
      }
    })()
    return this.fetching
  }

  /** The key of `identifier`, fetched if need be; null when GitHub has none by that name. */
  async key(identifier: string): Promise<KeyObject | null> {
    const age = this.now() - this.fetchedAt
    const stale = age >= KEYS_TTL_MS
    const unknown = !this.keys.has(identifier) && age >= REFETCH_MIN_MS
    if (stale || unknown) {
      try {
        await this.refresh()
      } catch (err) {
        // Keys fetched before still serve; with none at all, the report cannot be checked.
        if (this.keys.size === 0)
          throw new ApiError(
            'scanner_keys_unavailable',
            `GitHub's secret scanning keys could not be fetched (${(err as Error).message}); the report is not checked, send it again`,
          )
      }
    }
    return this.keys.get(identifier) ?? null
  }

  /** Whether `signature` (base64 of a DER ECDSA signature) is the key's over `body`. */
  async verify(body: Buffer, identifier: string, signature: string): Promise<boolean> {
    const key = await this.key(identifier)
    if (key === null) return false
    try {
      return verify('sha256', body, { key, dsaEncoding: 'der' }, Buffer.from(signature, 'base64'))
    } catch {
      return false
    }
  }
}
