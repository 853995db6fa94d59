// The management API's objects, as docs/api.md shows them.
export interface Limits {
  rate: { requests: number; per_seconds: number } | null
  monthly_quota: { requests: number } | null
}

export interface SubAccount {
  id: string
  name: string
  external_id: string | null
  status: 'active' | 'deactivated'
  metadata: Record<string, string>
  created_at: string
  updated_at: string
  deactivated_at: string | null
  limits: Limits
}

export interface ApiKey {
  id: string
  name: string
  scopes: string[]
  prefix: string
  status: 'active' | 'expired' | 'revoked'
  created_at: string
  expires_at: string | null
  rolled_from: string | null
  revoked_at: string | null
  last_used_at: string | null
}

export interface MintedKey extends ApiKey {
  api_key: string
  client_secret: string
}

export interface AuditEvent {
  id: string
  type: string
  created_at: string
  actor: { type: string; key_id?: string }
  target: { type: string; id: string }
  request_id: string | null
  source_ip: string | null
  data: unknown
}

export interface UsageEntry {
  sub_account_id: string
  external_id: string | null
  requests: number
  by_status: { '2xx': number; '3xx': number; '4xx': number; '5xx': number }
  days: { date: string; requests: number }[]
  limited: { rate: number; quota: number }
}

export interface WebhookEndpoint {
  id: string
  url: string
  event_types: string[]
  description: string | null
  status: 'active' | 'disabled'
  created_at: string
  disabled_at: string | null
  disabled_reason: string | null
}

export interface Delivery {
  event_id: string
  attempt: number
  status: number | null
  error: string | null
  duration_ms: number
  attempted_at: string
  next_attempt_at: string | null
}
