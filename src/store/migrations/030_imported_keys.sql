-- Keys from elsewhere (docs/key-imports.md): a key brought over from another gateway keeps working
-- as it was deployed, whatever its format. Its digest is SHA-256 of its value, as a minted key's is,
-- so that one lookup finds either. `origin` tells an imported key from one the gateway minted; its
-- `prefix` is its first four characters when they were given, else empty.
alter table api_keys
  add column origin text not null default 'minted' check (origin in ('minted', 'imported'));
