// The paths the gateway answers itself, each named once: the management API, the credential
// documents, the console and the sub-account portal (docs/api.md). No route may take them
// (proxy/paths.ts).
export const MANAGEMENT_PREFIX = '/v1/sub-accounts'

export const JWKS_PATH = '/.well-known/jwks.json'
export const TOKEN_PATH = '/oauth2/token'
export const AUTHORIZATION_SERVER_METADATA_PATH = '/.well-known/oauth-authorization-server'

/** The credential paths: the gateway answers them itself, and no route may take them. */
export const CREDENTIAL_PATHS = [JWKS_PATH, TOKEN_PATH, AUTHORIZATION_SERVER_METADATA_PATH] as const

/** Where a service behind no proxy verifies a key, on AUTHZ_PORT only (docs/api.md, Verifying a key). */
export const VERIFY_PATH = '/verify'

/** Where GitHub's secret scanning reports leaked keys (docs/secret-scanning.md): no route may take it. */
export const SECRET_SCANNING_GITHUB_PATH = '/v1/secret-scanning/github'

// Where the console lives (docs/console.md): its page, and its assets below it.
export const CONSOLE_PREFIX = '/console'
export const CONSOLE_ASSETS = `${CONSOLE_PREFIX}/assets`

// Where the sub-account portal lives (docs/api.md, Portal sessions): its page, its assets and its
// API below it.
export const PORTAL_PREFIX = '/portal'
export const PORTAL_API = `${PORTAL_PREFIX}/api`
export const PORTAL_ASSETS = `${PORTAL_PREFIX}/assets`
