// Waiting in tests: polling until something holds, sleeping, giving up on a promise.

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/**
 * Polls `check` every `everyMs` until it returns true or `timeoutMs` passed; returns the time it
 * took, or null when it never held.
 */
export async function eventually(
  timeoutMs: number,
  check: () => Promise<boolean>,
  everyMs = 20,
): Promise<number | null> {
  const start = Date.now()
  for (;;) {
    if (await check()) return Date.now() - start
    if (Date.now() - start > timeoutMs) return null
    await sleep(everyMs)
  }
}

/** Whether `check` came to hold within `timeoutMs` (polled like `eventually`). */
export async function until(timeoutMs: number, check: () => Promise<boolean>, everyMs = 20): Promise<boolean> {
  return (await eventually(timeoutMs, check, everyMs)) !== null
}

/** Resolves with `promise`'s value, or with `onTimeout` if it has not settled within `ms`. */
export async function orTimeout<T, U>(promise: Promise<T>, ms: number, onTimeout: U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([
      promise,
      new Promise<U>((resolve) => (timer = setTimeout(() => resolve(onTimeout), ms))),
    ])
  } finally {
    clearTimeout(timer)
  }
}
