// A replica's side of the signing keys (docs/credentials.md, Signing keys): loads them into its
// keyring at start (making the first one on a new database), loads them again when the bus says
// they changed and on a timer without it, and rotates them when they are due if it is the replica
// that takes the lock.
import type { FastifyBaseLogger } from 'fastify'
import { WrongEncryptionKeyError } from '../encryption/seal.js'
import { withDeadline } from '../store/db.js'
import type { Keyring } from './keyring.js'
import { rotationDue } from './schedule.js'
import type { SigningKeyStore, StoredSigningKey } from './store.js'

/** Without a message on the bus, a replica sees a rotation within this (docs/credentials.md: 60 s). */
export const DEFAULT_RELOAD_INTERVAL_MS = 30_000
/** A keyring still empty tries again this soon. */
const RETRY_EMPTY_MS = 1_000
/** How long a stop waits for a reload under way (`stop`). */
const STOP_WAIT_MS = 2_000

export interface SigningKeySyncOptions {
  store: SigningKeyStore
  keyring: Keyring
  /** SIGNING_KEY_ROTATION_DAYS, in ms. */
  rotationPeriodMs: number
  reloadIntervalMs?: number | undefined
  log: FastifyBaseLogger
  /** Tells every replica, this one included, that the signing keys changed (the invalidation bus). */
  announce(): Promise<void>
}

/** What the keyring was last given: the keys and the instants that decide what they do. */
const fingerprint = (keys: readonly StoredSigningKey[]): string =>
  keys.map((key) => `${key.kid}/${key.activatesAt}/${key.publishedUntil}`).join(',')

export class SigningKeySync {
  private readonly reloadIntervalMs: number
  private timer: NodeJS.Timeout | null = null
  /** The timer's reload and rotation under way: the app's close waits for it. */
  private ticking: Promise<void> | null = null
  private loaded: string | null = null
  /** The reload under way, and whether another was asked for meanwhile (it may have read too early). */
  private running: Promise<void> | null = null
  private again = false
  private stopped = false

  private readonly options: SigningKeySyncOptions
  constructor(options: SigningKeySyncOptions) {
    this.options = options
    this.reloadIntervalMs = options.reloadIntervalMs ?? DEFAULT_RELOAD_INTERVAL_MS
  }

  /**
   * The first load. A wrong ENCRYPTION_KEY stops the start (never new keys in place of the ones it
   * cannot open); a store that cannot answer does not: the keyring stays empty (nothing is
   * signed) and the timer tries again.
   */
  async start(): Promise<void> {
    try {
      await this.reloadOnce()
      await this.rotateIfDue()
    } catch (err) {
      if (err instanceof WrongEncryptionKeyError) throw err
      this.options.log.warn({ err }, 'cannot load the signing keys from Postgres; trying again')
    }
    this.schedule()
  }

  /** The bus said the keys changed (or may have missed saying so): load them again, once. */
  requestReload(): void {
    if (this.stopped) return
    void this.reloadOnce().catch((err: unknown) => this.failed(err))
  }

  private schedule(): void {
    if (this.stopped) return
    // Nothing loaded yet (the store could not answer at start): try again soon, not in a while.
    const delayMs = this.loaded === null ? Math.min(RETRY_EMPTY_MS, this.reloadIntervalMs) : this.reloadIntervalMs
    this.timer = setTimeout(() => {
      this.ticking = this.tick().finally(() => {
        this.ticking = null
        this.schedule()
      })
    }, delayMs)
    this.timer.unref()
  }

  private async tick(): Promise<void> {
    try {
      await this.reloadOnce()
      await this.rotateIfDue()
    } catch (err) {
      this.failed(err)
    }
  }

  private failed(err: unknown): void {
    if (err instanceof WrongEncryptionKeyError)
      this.options.log.error(
        { err },
        'the signing keys changed but do not open under ENCRYPTION_KEY; keeping the old ones',
      )
    else this.options.log.warn({ err }, 'cannot load the signing keys from Postgres; trying again')
  }

  /** One reload at a time; a request during one runs another after it. */
  private reloadOnce(): Promise<void> {
    if (this.running !== null) {
      this.again = true
      return this.running
    }
    this.running = (async () => {
      try {
        do {
          this.again = false
          await this.reload()
        } while (this.again && !this.stopped)
      } finally {
        this.running = null
      }
    })()
    return this.running
  }

  private async reload(): Promise<void> {
    const { store, keyring } = this.options
    let stored = await store.published()
    if (stored.length === 0) {
      if ((await store.ensureSigningKey()) !== null) this.options.log.info('made the first signing key')
      stored = await store.published()
    }
    const seen = fingerprint(stored)
    if (seen === this.loaded) return
    const held = new Map(keyring.keys().map((key) => [key.kid, key.privateKey]))
    const keys = await store.unseal(stored, (kid) => held.get(kid) ?? null)
    if (this.stopped) return
    await keyring.replace(keys)
    this.loaded = seen
  }

  private async rotateIfDue(): Promise<void> {
    const { store, keyring, rotationPeriodMs } = this.options
    if (this.stopped || rotationDue(keyring.keys(), store.clock(), rotationPeriodMs) === null) return
    const created = await store.rotateIfDue(rotationPeriodMs)
    if (created === null) return
    this.options.log.info(
      { kid: created.kid, activatesAt: new Date(created.activatesAt).toISOString() },
      'published the next signing key',
    )
    // Stopped meanwhile (a stop waits 2 s at most): the bus may be closed; the other replicas
    // load the key on their next reload.
    if (this.stopped) return
    await this.options.announce()
  }

  /**
   * Stops the timer and waits for a reload or rotation under way, for STOP_WAIT_MS at most: one
   * that takes longer waits on a Postgres that does not answer (postgres.js tries a refused
   * connection again after pauses of up to 20 s), and the pool's end cuts it. A rotation is one
   * transaction: cut, it changes nothing.
   */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer !== null) clearTimeout(this.timer)
    const underWay = Promise.all([this.ticking, this.running?.catch(() => {})])
    await withDeadline(underWay, STOP_WAIT_MS).catch(() => {})
  }
}
