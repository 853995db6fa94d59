-- The sub-accounts list's `q` by any word of a name (docs/api.md, Sub-accounts): "north" finds
-- "Warehouse North". Each sub-account's name, lower-cased, split on what is not a letter or a
-- digit, a row a word, kept by a trigger as names change; `text_pattern_ops` lets a `like
-- 'nor%'` use the index whatever the database's collation, within one parent. The sub-account's
-- `seq` (which never changes) is kept beside each word, so that a page of a common word's matches
-- in the list's order is read from this index alone (store/tenants.ts, listSubAccounts).
create table tenant_name_words (
  tenant_id uuid not null references tenants (id) on delete cascade,
  parent_id uuid not null,
  word      text not null,
  seq       bigint not null,
  primary key (tenant_id, word)
);
create index tenant_name_words_search on tenant_name_words (parent_id, word text_pattern_ops) include (seq);

create function tenant_name_words_keep() returns trigger language plpgsql as $$
begin
  delete from tenant_name_words where tenant_id = new.id;
  if new.parent_id is not null then
    insert into tenant_name_words (tenant_id, parent_id, word, seq)
      select distinct new.id, new.parent_id, word, new.seq
      from regexp_split_to_table(lower(new.name), '[^[:alnum:]]+') as word
      where word <> '';
  end if;
  return null;
end
$$;
create trigger tenant_name_words_keep after insert or update of name, parent_id on tenants
  for each row execute function tenant_name_words_keep();

insert into tenant_name_words (tenant_id, parent_id, word, seq)
  select distinct t.id, t.parent_id, word, t.seq
  from tenants t cross join lateral regexp_split_to_table(lower(t.name), '[^[:alnum:]]+') as word
  where t.parent_id is not null and word <> '';
