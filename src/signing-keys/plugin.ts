// The signing keys from Postgres (docs/credentials.md, Signing keys) as a plugin: fills the app's
// keyring before the routes that sign are registered, keeps it in step with the other replicas
// (over the tenancy cache's invalidation bus, and on a timer), and stops with the app.
import fp from 'fastify-plugin'
import { cacheKeys } from '../cache/index.js'
import { DAY_MS } from './schedule.js'
import { SigningKeyStore } from './store.js'
import { SigningKeySync } from './sync.js'
import type { Sql } from '../store/db.js'

export interface SigningKeysPluginOptions {
  sql: Sql
  /** ENCRYPTION_KEY (encryption/key.ts says where it comes from). */
  encryptionKey: Buffer
  /** SIGNING_KEY_ROTATION_DAYS. */
  rotationDays: number
  /** Default 30 s; tests shorten it. */
  reloadIntervalMs?: number | undefined
}

export const signingKeysPlugin = fp<SigningKeysPluginOptions>(
  async (app, { sql, encryptionKey, rotationDays, reloadIntervalMs }) => {
    const keyring = app.keyring
    const store = new SigningKeyStore({ sql, encryptionKey, clock: keyring.clock })
    const cache = app.tenancyCache
    const sync = new SigningKeySync({
      store,
      keyring,
      rotationPeriodMs: rotationDays * DAY_MS,
      reloadIntervalMs,
      log: app.log,
      announce: () => cache.invalidate([cacheKeys.signingKeys]),
    })
    // null: the bus may have lost messages, a rotation's among them.
    cache.onEvict((names) => {
      if (names === null || names.includes(cacheKeys.signingKeys)) sync.requestReload()
    })
    await sync.start()
    // Runs before the cache's (onClose hooks run last registered first): an announcement under
    // way still has the bus.
    app.addHook('onClose', () => sync.stop())
  },
  { name: 'signing-keys', dependencies: ['tenancy-cache'] },
)
