-- Two things every event paid for and nothing used (bench/README.md, bench:events):
-- `seq`'s own unique index (an identity column is unique by construction, and every read of
-- `seq` is a parent's, through the (account_id, …, seq) indexes), and the foreign key to
-- `tenants`, whose check share-locked the parent account's row from every change at once
-- (accounts are never deleted; the change that writes an event has just read or locked its account).
alter table events drop constraint events_seq_key;
alter table events drop constraint events_account_id_fkey;
