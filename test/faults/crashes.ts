// What would have crashed the gateway's process (it runs in the test's).
import type { TestLike } from '../helpers/test-like.js'

export interface Crash {
  kind: 'uncaughtException' | 'unhandledRejection'
  message: string
  /** The first frames of its stack, to say where it came from. */
  where: string
}

/**
 * Records every uncaught exception and unhandled rejection in this process (the gateway runs
 * in it) instead of letting the first one end the test file unreported: a test asserts the list
 * is empty. (In production, start.ts's stop rules, signals.ts, turn either into a shutdown.)
 */
export function watchCrashes(t: TestLike): Crash[] {
  const crashes: Crash[] = []
  const record = (kind: Crash['kind']) => (err: unknown) => {
    const error = err instanceof Error ? err : new Error(String(err))
    const where = (error.stack ?? '')
      .split('\n')
      .slice(1, 4)
      .map((line) => line.trim().replace(/^at /, ''))
      .join(' | ')
    crashes.push({ kind, message: `${(error as NodeJS.ErrnoException).code ?? error.name}: ${error.message}`, where })
  }
  const onException = record('uncaughtException')
  const onRejection = record('unhandledRejection')
  process.on('uncaughtException', onException)
  process.on('unhandledRejection', onRejection)
  t.teardown(() => {
    process.off('uncaughtException', onException)
    process.off('unhandledRejection', onRejection)
  })
  return crashes
}
