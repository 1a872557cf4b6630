-- Every instance caches pets and pages of the listing; this tells all of them what changed, once
-- per statement however many rows it wrote: an import of a million pets is one notice. The
-- payload is "<min id> <max id> <status>..." ('-' for no status) for added pets, or '*' when rows
-- were changed or removed (no operation does either; an operator may).
CREATE FUNCTION notify_pets_added() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  summary text;
BEGIN
  SELECT min(id) || ' ' || max(id) || ' ' || string_agg(DISTINCT coalesce(status, '-'), ' ')
    INTO summary FROM added;
  IF summary IS NOT NULL THEN
    PERFORM pg_notify('pets_changed', summary);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER pets_added
  AFTER INSERT ON pets REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION notify_pets_added();

CREATE FUNCTION notify_pets_rewritten() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('pets_changed', '*');
  RETURN NULL;
END
$$;

CREATE TRIGGER pets_rewritten
  AFTER UPDATE OR DELETE OR TRUNCATE ON pets
  FOR EACH STATEMENT EXECUTE FUNCTION notify_pets_rewritten();
