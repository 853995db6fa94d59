// The ENCRYPTION_KEY of the gateways and CLI runs the tests start on a real Postgres (with
// DATABASE_URL both refuse to start without one). Every test database is fresh, so one key serves
// them all; replicas sharing a database share it, as a deployment's do.
export const TEST_ENCRYPTION_KEY = Buffer.from('tenancy-gateway tests only key!!').toString('base64')
