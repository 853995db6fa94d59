-- Cells: where a tenant is served (docs/configuration.md, routes: `cells`). A sub-account's
-- `placement` is its own cell; a parent account's is the default of its sub-accounts that have
-- none (and its own, when it acts as itself). `allowed_cells` is a parent account's: the cells the
-- operator lets it place its sub-accounts in (`cli -- accounts placement`); null: none. Names are
-- a route table's (`[a-z][a-z0-9-]{0,31}`); the table is config, so a name here that no route has
-- is not refused: that tenant's requests are answered 421 cell_not_served.
alter table tenants
  add column placement     text,
  add column allowed_cells text[];
