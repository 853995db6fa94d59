// Shapes of the identifiers that travel in paths and in the acting header (docs/api.md).

export const UUID_PATTERN = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'
export const EXTERNAL_ID_PATTERN = '^[A-Za-z0-9._:@/+-]{1,128}$'

const UUID = new RegExp(UUID_PATTERN)
const EXTERNAL_ID = new RegExp(EXTERNAL_ID_PATTERN)

export function isUuid(value: string): boolean {
  return UUID.test(value)
}

export function isExternalId(value: string): boolean {
  return EXTERNAL_ID.test(value)
}
