-- Catalog/session SQL sent by ibis, captured from PostgreSQL 15 (tests/unit/client_sql/capture.py).
-- oids: {"class.demo.cities": 16393, "class.demo.pt": 16405, "class.demo.trips": 16386, "class.demo.trips_pkey": 16391, "namespace.demo": 16385, "namespace.public": 2200, "type.demo._cities": 16394, "type.demo._mood": 16398, "type.demo._pt": 16406, "type.demo._trips": 16387, "type.demo.cities": 16395, "type.demo.mood": 16399, "type.demo.pt": 16407, "type.demo.trips": 16388}
-- next
BEGIN
-- next
SET TIMEZONE = UTC
-- next
COMMIT
-- next
SELECT CURRENT_DATABASE()
-- next
SELECT CURRENT_SCHEMA
-- next
SELECT DISTINCT table_name FROM information_schema.tables WHERE TRUE AND table_schema = 'public' AND table_catalog = 'icegres' UNION ALL SELECT DISTINCT table_name FROM information_schema.tables WHERE table_type = 'LOCAL TEMPORARY'
-- next
SELECT DISTINCT table_name FROM information_schema.tables WHERE TRUE AND table_schema = 'demo'
-- next
-- params: {"$1": "{demo}", "$2": "trips"}
SELECT
	  a.attname AS column_name,
	  CASE
	    WHEN EXISTS(
	      SELECT 1
	      FROM pg_catalog.pg_type t
	      INNER JOIN pg_catalog.pg_enum e
	              ON e.enumtypid = t.oid
	             AND t.typname = pg_catalog.format_type(a.atttypid, a.atttypmod)
	    ) THEN 'enum'
	    ELSE pg_catalog.format_type(a.atttypid, a.atttypmod)
	  END AS data_type,
	  NOT a.attnotnull AS nullable
	FROM pg_catalog.pg_attribute a
	INNER JOIN pg_catalog.pg_class c
	   ON a.attrelid = c.oid
	INNER JOIN pg_catalog.pg_namespace n
	   ON c.relnamespace = n.oid
	WHERE a.attnum > 0
	  AND NOT a.attisdropped
	  AND n.nspname = ANY($1)
	  AND c.relname = $2
	ORDER BY a.attnum ASC
-- next
SELECT "t0"."id", "t0"."city" FROM "demo"."trips" AS "t0" WHERE "t0"."id" > 1
-- next
CREATE TEMPORARY VIEW ibis_postgres_metadata_s72vpwrmfbbcvo5mwdps64gqaq AS SELECT name FROM demo.cities
-- next
SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema()
-- next
DROP VIEW IF EXISTS ibis_postgres_metadata_s72vpwrmfbbcvo5mwdps64gqaq
-- next
DEALLOCATE ALL
