-- The keys that sign access tokens and identity assertions (docs/credentials.md, Signing keys).
-- One signs at a time: the latest whose activates_at has come. A key is published (in the JWKS,
-- and accepted) from its creation until published_until: null while nothing has ended it; its
-- successor's activation plus the longest life of what it signed once that successor exists; the
-- moment it was withdrawn (signing-keys rotate --compromised). Rows are kept after that, as a record.
create table signing_keys (
  -- RFC 7638 thumbprint of the public key.
  kid             text primary key,
  -- The public key as the JWKS publishes it (kty, crv, x, y, kid, alg, use): never a private member.
  public_jwk      jsonb not null check (jsonb_typeof(public_jwk) = 'object' and not public_jwk ? 'd'),
  -- The private key (PKCS #8), sealed with AES-256-GCM under ENCRYPTION_KEY (encryption/seal.ts).
  private_key     bytea not null,
  created_at      timestamptz not null default now(),
  activates_at    timestamptz not null,
  published_until timestamptz,
  withdrawn_at    timestamptz,
  check (withdrawn_at is null or published_until = withdrawn_at)
);
