// Where the sub-account portal lives (docs/api.md, Portal sessions): its page, its assets and its
// API below it.
export const PORTAL_PREFIX = '/portal'
export const PORTAL_API = `${PORTAL_PREFIX}/api`
export const PORTAL_ASSETS = `${PORTAL_PREFIX}/assets`
