-- Catalog/session SQL sent by psycopg2, captured from PostgreSQL 15 (tests/unit/client_sql/capture.py).
-- oids: {"class.demo.cities": 16393, "class.demo.pt": 16405, "class.demo.trips": 16386, "class.demo.trips_pkey": 16391, "namespace.demo": 16385, "namespace.public": 2200, "type.demo._cities": 16394, "type.demo._mood": 16398, "type.demo._pt": 16406, "type.demo._trips": 16387, "type.demo.cities": 16395, "type.demo.mood": 16399, "type.demo.pt": 16407, "type.demo.trips": 16388}
-- next
BEGIN
-- next
SELECT t.oid, typarray, attname, atttypid
	FROM pg_type t
	JOIN pg_namespace ns ON typnamespace = ns.oid
	JOIN pg_attribute a ON attrelid = typrelid
	WHERE typname = 'pt' AND nspname = 'demo'
	    AND attnum > 0 AND NOT attisdropped
	ORDER BY attnum;
-- next
ROLLBACK
-- next
SELECT t.oid, typarray
	FROM pg_type t JOIN pg_namespace ns
	    ON typnamespace = ns.oid
	WHERE typname = 'hstore';
-- next
SELECT id, city FROM demo.trips WHERE id > 1
