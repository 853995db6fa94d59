// The header a parent sends to act as one of its sub-accounts (docs/api.md, acting): read before
// routing, where single headers are counted (http/header-counts.ts), and by the acting rules.
export const ACTING_HEADER = 'x-service-acting-tenant'
