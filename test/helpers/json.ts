// A response body as the tests read it: loosely, each property a test uses then checked by an assertion.
// biome-ignore lint/suspicious/noExplicitAny: the assertions, not the type, check a body's shape
export type JsonBody = any
