// Where the sub-account portal lives (docs/api.md, Portal sessions): its page, and its API below it.
export const PORTAL_PREFIX = '/portal'
export const PORTAL_API = `${PORTAL_PREFIX}/api`
