// What the helpers need of a tap test: a teardown (and, for some, a comment). A file's top-level
// `t`, a subtest and a fake in a unit test all fit.
import tap from 'tap'

export interface TestLike {
  teardown(fn: () => unknown): void
}

export interface CommentingTestLike extends TestLike {
  comment(...args: unknown[]): void
}

/**
 * Ends the whole run with `error`'s message: a server every test needs cannot be reached, and a
 * failure per test, each with its stack, would bury the one line that says which server and how
 * to point the tests at another. Returns the error for the caller to throw, should the run go on.
 */
export function stopTheRun(error: Error): Error {
  tap.bailout(error.message)
  return error
}
