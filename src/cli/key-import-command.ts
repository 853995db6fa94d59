// `cli -- keys import --account <uuid> --file keys.ndjson [--dry-run]` (docs/key-imports.md): a
// parent account's own keys from elsewhere, as the import route brings in its sub-accounts' keys.
// Each line as the route takes it, without sub_account_id or external_id; the answer as the route
// gives it, a line per input line then the summary, on stdout.
import { open } from 'node:fs/promises'
import { readImportBody } from '../auth/key-import-body.js'
import { importAnswer } from '../auth/key-imports.js'
import { operatorOrigin } from '../events/record.js'
import { migrate } from '../store/migrate.js'
import { type Command, parentAccount, required, tellReplicas, UsageError, uuid, WROTE_OUTPUT } from './options.js'

export const importKeys: Command = async (sql, options, config, io) => {
  const accountId = uuid(options, 'account')
  const file = required(options, 'file')
  await migrate(sql)
  await parentAccount(sql, accountId)
  const cannotRead = (err: unknown) => new UsageError(`--file ${file} cannot be read: ${(err as Error).message}`)
  // Opened before the spool is: a missing file is told at once, not as a stream's late error.
  const input = await open(file, 'r').catch((err: unknown) => {
    throw cannotRead(err)
  })
  let read: Awaited<ReturnType<typeof readImportBody>>
  try {
    read = await readImportBody(input.createReadStream({ autoClose: false }), 'account')
  } catch (err) {
    throw cannotRead(err)
  } finally {
    await input.close()
  }
  if ('tooLarge' in read)
    throw new UsageError(
      read.tooLarge === 'bytes'
        ? `--file is larger than ${read.limit} bytes: split it and import each part`
        : `--file has more than ${read.limit} lines: split it and import each part`,
    )
  if (read.lines === 0) {
    await read.spool.close()
    throw new UsageError('--file is empty: one JSON object a line')
  }
  const redis = config.redis
  const cache = {
    // Replicas may keep a value tried before its import as unknown: tell them now.
    invalidate: (names: readonly string[]) =>
      redis === undefined
        ? Promise.resolve()
        : tellReplicas(redis, config.redisKeyPrefix, [...names], 'the keys are imported', io),
  }
  const answer = importAnswer(
    { sql, cache, accountId, owner: 'account', origin: operatorOrigin(), dryRun: options['dry-run'] === true },
    read,
  )
  for await (const text of answer) io.stdout(text)
  return WROTE_OUTPUT
}
