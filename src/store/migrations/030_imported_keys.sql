-- Keys from elsewhere (docs/key-imports.md), and keys leaked elsewhere.
--
-- Imported keys (docs/key-imports.md): a key brought over from another gateway keeps working
-- as it was deployed, whatever its format. Its digest is SHA-256 of its value, as a minted key's is,
-- so that one lookup finds either. `origin` tells an imported key from one the gateway minted; its
-- `prefix` is its first four characters when they were given, else empty.
alter table api_keys
  add column origin text not null default 'minted' check (origin in ('minted', 'imported'));

-- Leaks reported by secret scanning (docs/secret-scanning.md): when a live key was reported, where
-- and by whom. Null until then; set once, so that the same report again changes nothing.
alter table api_keys
  add column leaked_at     timestamptz,
  add column leaked_url    text,
  add column leaked_source text,
  add check ((leaked_at is null) = (leaked_source is null));

-- What a parent's leaked keys come to: revoked at once (the default), or only reported.
alter table tenants
  add column leak_policy text not null default 'revoke' check (leak_policy in ('revoke', 'alert'));
