// What the helpers need of a tap test: a teardown (and, for some, a comment). A file's top-level
// `t`, a subtest and a fake in a unit test all fit.
export interface TestLike {
  teardown(fn: () => unknown): void
}

export interface CommentingTestLike extends TestLike {
  comment(...args: unknown[]): void
}
