-- Catalog/session SQL sent by pgcli, captured from PostgreSQL 15 (tests/unit/client_sql/capture.py).
-- oids: {"class.demo.cities": 16393, "class.demo.pt": 16405, "class.demo.trips": 16386, "class.demo.trips_pkey": 16391, "namespace.demo": 16385, "namespace.public": 2200, "type.demo._cities": 16394, "type.demo._mood": 16398, "type.demo._pt": 16406, "type.demo._trips": 16387, "type.demo.cities": 16395, "type.demo.mood": 16399, "type.demo.pt": 16407, "type.demo.trips": 16388}
-- next
SELECT 1
-- next
show time zone
-- next
set time zone "Europe/Berlin"
-- next
SELECT * FROM unnest(current_schemas(true))
-- next
SELECT  nspname
	        FROM    pg_catalog.pg_namespace
	        ORDER BY 1
-- next
-- params: {"$1": "{r,p,f}"}
SELECT  n.nspname schema_name,
	                c.relname table_name
	        FROM    pg_catalog.pg_class c
	                LEFT JOIN pg_catalog.pg_namespace n
	                    ON n.oid = c.relnamespace
	        WHERE   c.relkind = ANY($1)
	        ORDER BY 1,2;
-- next
-- params: {"$1": "{r,p,f}"}
SELECT  nsp.nspname schema_name,
	                        cls.relname table_name,
	                        att.attname column_name,
	                        att.atttypid::regtype::text type_name,
	                        att.atthasdef AS has_default,
	                        pg_catalog.pg_get_expr(def.adbin, def.adrelid, true) as default
	                FROM    pg_catalog.pg_attribute att
	                        INNER JOIN pg_catalog.pg_class cls
	                            ON att.attrelid = cls.oid
	                        INNER JOIN pg_catalog.pg_namespace nsp
	                            ON cls.relnamespace = nsp.oid
	                        LEFT OUTER JOIN pg_attrdef def
	                            ON def.adrelid = att.attrelid
	                            AND def.adnum = att.attnum
	                WHERE   cls.relkind = ANY($1)
	                        AND NOT att.attisdropped
	                        AND att.attnum  > 0
	                ORDER BY 1, 2, att.attnum
-- next
SELECT s_p.nspname AS parentschema,
	                       t_p.relname AS parenttable,
	                       unnest((
	                        select
	                            array_agg(attname ORDER BY i)
	                        from
	                            (select unnest(confkey) as attnum, generate_subscripts(confkey, 1) as i) x
	                            JOIN pg_catalog.pg_attribute c USING(attnum)
	                            WHERE c.attrelid = fk.confrelid
	                        )) AS parentcolumn,
	                       s_c.nspname AS childschema,
	                       t_c.relname AS childtable,
	                       unnest((
	                        select
	                            array_agg(attname ORDER BY i)
	                        from
	                            (select unnest(conkey) as attnum, generate_subscripts(conkey, 1) as i) x
	                            JOIN pg_catalog.pg_attribute c USING(attnum)
	                            WHERE c.attrelid = fk.conrelid
	                        )) AS childcolumn
	                FROM pg_catalog.pg_constraint fk
	                JOIN pg_catalog.pg_class      t_p ON t_p.oid = fk.confrelid
	                JOIN pg_catalog.pg_namespace  s_p ON s_p.oid = t_p.relnamespace
	                JOIN pg_catalog.pg_class      t_c ON t_c.oid = fk.conrelid
	                JOIN pg_catalog.pg_namespace  s_c ON s_c.oid = t_c.relnamespace
	                WHERE fk.contype = 'f';
-- next
SELECT n.nspname schema_name,
	                           t.typname type_name
	                    FROM   pg_catalog.pg_type t
	                           INNER JOIN pg_catalog.pg_namespace n
	                              ON n.oid = t.typnamespace
	                    WHERE ( t.typrelid = 0  -- non-composite types
	                            OR (  -- composite type, but not a table
	                                  SELECT c.relkind = 'c'
	                                  FROM pg_catalog.pg_class c
	                                  WHERE c.oid = t.typrelid
	                                )
	                          )
	                          AND NOT EXISTS( -- ignore array types
	                                SELECT  1
	                                FROM    pg_catalog.pg_type el
	                                WHERE   el.oid = t.typelem AND el.typarray = t.oid
	                              )
	                          AND n.nspname <> 'pg_catalog'
	                          AND n.nspname <> 'information_schema'
	                    ORDER BY 1, 2;
-- next
SELECT d.datname
	        FROM pg_catalog.pg_database d
	        ORDER BY 1
-- next
SELECT n.nspname schema_name,
	                        p.proname func_name,
	                        p.proargnames,
	                        COALESCE(proallargtypes::regtype[], proargtypes::regtype[])::text[],
	                        p.proargmodes,
	                        prorettype::regtype::text return_type,
	                        p.prokind = 'a' is_aggregate,
	                        p.prokind = 'w' is_window,
	                        p.proretset is_set_returning,
	                        d.deptype = 'e' is_extension,
	                        pg_get_expr(proargdefaults, 0) AS arg_defaults
	                FROM pg_catalog.pg_proc p
	                        INNER JOIN pg_catalog.pg_namespace n
	                            ON n.oid = p.pronamespace
	                LEFT JOIN pg_depend d ON d.objid = p.oid and d.deptype = 'e'
	                WHERE p.prorettype::regtype != 'trigger'::regtype
	                ORDER BY 1, 2
-- next
SELECT count(*) FROM demo.cities
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{r,p,""}')
	                
	            AND n.nspname <> 'pg_catalog'
	            AND n.nspname <> 'information_schema'
	            AND n.nspname !~ '^pg_toast'
	            AND pg_catalog.pg_table_is_visible(c.oid) 
	                
	            ORDER BY 1, 2
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{v,s,""}')
	                
	            AND n.nspname <> 'pg_catalog'
	            AND n.nspname <> 'information_schema'
	            AND n.nspname !~ '^pg_toast'
	            AND pg_catalog.pg_table_is_visible(c.oid) 
	                
	            ORDER BY 1, 2
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{i,s,""}')
	                
	            AND n.nspname <> 'pg_catalog'
	            AND n.nspname <> 'information_schema'
	            AND n.nspname !~ '^pg_toast'
	            AND pg_catalog.pg_table_is_visible(c.oid) 
	                
	            ORDER BY 1, 2
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{r,p,v,m,S,f,""}')
	                
	            AND n.nspname <> 'pg_catalog'
	            AND n.nspname <> 'information_schema'
	            AND n.nspname !~ '^pg_toast'
	            AND pg_catalog.pg_table_is_visible(c.oid) 
	                
	            ORDER BY 1, 2
-- next
SELECT n.nspname AS name, pg_catalog.pg_get_userbyid(n.nspowner) AS owner
	                
	              FROM pg_catalog.pg_namespace n WHERE n.nspname
	                !~ '^pg_' AND n.nspname <> 'information_schema'
	              ORDER BY 1
-- next
SELECT  n.nspname as schema,
	                    p.proname as name,
	                    pg_catalog.pg_get_function_result(p.oid)
	                      as "Result data type",
	                    pg_catalog.pg_get_function_arguments(p.oid)
	                      as "Argument data types",
	                     CASE
	                        WHEN p.prokind = 'a' THEN 'agg'
	                        WHEN p.prokind = 'w' THEN 'window'
	                        WHEN p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype
	                            THEN 'trigger'
	                        ELSE 'normal'
	                    END as type 
	            FROM    pg_catalog.pg_proc p
	                    LEFT JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
	                            
	            WHERE   pg_catalog.pg_function_is_visible(p.oid)  AND n.nspname <> 'pg_catalog'
	                   AND n.nspname <> 'information_schema'  ORDER BY 1, 2, 4
-- next
SELECT n.nspname as schema,
	                    pg_catalog.format_type(t.oid, NULL) AS name,   pg_catalog.obj_description(t.oid, 'pg_type')
	                        as description   FROM    pg_catalog.pg_type t
	                            LEFT JOIN pg_catalog.pg_namespace n
	                              ON n.oid = t.typnamespace
	                    WHERE   (t.typrelid = 0 OR
	                              ( SELECT c.relkind = 'c'
	                                FROM pg_catalog.pg_class c
	                                WHERE c.oid = t.typrelid))
	                            AND NOT EXISTS(
	                                SELECT 1
	                                FROM pg_catalog.pg_type el
	                                WHERE el.oid = t.typelem
	                                      AND el.typarray = t.oid)  AND pg_catalog.pg_type_is_visible(t.oid)  AND n.nspname <> 'pg_catalog'
	                   AND n.nspname <> 'information_schema'  ORDER BY 1, 2
-- next
SELECT d.datname as name,
	        pg_catalog.pg_get_userbyid(d.datdba) as owner,
	        pg_catalog.pg_encoding_to_char(d.encoding) as encoding,
	        d.datcollate as collate,
	        d.datctype as ctype,
	        pg_catalog.array_to_string(d.datacl, E'
	') AS access_privileges
	        
	        FROM pg_catalog.pg_database d
	        
	        
	        ORDER BY 1
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{r,p,""}')
	                 AND n.nspname ~ '^(demo)$'
	                 AND c.relname ~ '^(.*)$'
	            ORDER BY 1, 2
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{i,s,""}')
	                 AND n.nspname ~ '^(demo)$'
	                 AND c.relname ~ '^(.*)$'
	            ORDER BY 1, 2
-- next
-- params: {"$1": "^(demo)$", "$2": "^(trips)$"}
SELECT c.oid, n.nspname, c.relname
	             FROM pg_catalog.pg_class c
	             LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	             WHERE n.nspname ~ $1 AND c.relname OPERATOR(pg_catalog.~) $2
	             ORDER BY 2,3
-- next
SELECT c.relchecks, c.relkind, c.relhasindex,
	                    c.relhasrules, c.relhastriggers, false as relhasoids,
	                    '',
	                    c.reltablespace,
	                    CASE WHEN c.reloftype = 0 THEN ''
	                        ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text
	                    END,
	                    c.relpersistence,
	                    c.relispartition
	                 FROM pg_catalog.pg_class c
	                 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
	                 WHERE c.oid = '16386'
-- next
SELECT a.attname,
	    pg_catalog.format_type(a.atttypid, a.atttypmod)
	    , (SELECT substring(pg_catalog.pg_get_expr(d.adbin, d.adrelid, true) for 128)
	                     FROM pg_catalog.pg_attrdef d
	                     WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef)
	                    , a.attnotnull,
	(SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
	                    WHERE c.oid = a.attcollation
	                    AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
	  a.attidentity,
	  a.attgenerated,
	 NULL AS indexdef, NULL AS attfdwoptions FROM pg_catalog.pg_attribute a WHERE a.attrelid = '16386' AND
	    a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum;
-- next
SELECT c2.relname,
	                                i.indisprimary,
	                                i.indisunique,
	                                i.indisclustered,
	                                i.indisvalid,
	                                pg_catalog.pg_get_indexdef(i.indexrelid, 0, true),
	                                pg_catalog.pg_get_constraintdef(con.oid, true),
	                                contype,
	                                condeferrable,
	                                condeferred,
	                                c2.reltablespace
	                        FROM pg_catalog.pg_class c,
	                            pg_catalog.pg_class c2,
	                            pg_catalog.pg_index i
	                        LEFT JOIN pg_catalog.pg_constraint con
	                        ON conrelid = i.indrelid
	                            AND conindid = i.indexrelid
	                            AND contype IN ('p','u','x')
	                        WHERE c.oid = '16386'
	                            AND c.oid = i.indrelid
	                            AND i.indexrelid = c2.oid
	                        ORDER BY i.indisprimary DESC,
	                            i.indisunique DESC,
	                            c2.relname;
-- next
SELECT c.oid::pg_catalog.regclass
	FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
	WHERE c.oid = i.inhparent
	  AND i.inhrelid = '16386'
	ORDER BY inhseqno
-- next
SELECT c.oid::pg_catalog.regclass
	                        FROM pg_catalog.pg_class c,
	                            pg_catalog.pg_inherits i
	                        WHERE c.oid = i.inhrelid
	                            AND i.inhparent = '16386'
	                        ORDER BY c.oid::pg_catalog.regclass::pg_catalog.text;
-- next
SELECT c.relchecks, c.relkind, c.relhasindex,
	                    c.relhasrules, c.relhastriggers, false as relhasoids,
	                    pg_catalog.array_to_string(c.reloptions || array(select
	        'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', '),
	                    c.reltablespace,
	                    CASE WHEN c.reloftype = 0 THEN ''
	                        ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text
	                    END,
	                    c.relpersistence,
	                    c.relispartition
	                 FROM pg_catalog.pg_class c
	                 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
	                 WHERE c.oid = '16386'
-- next
SELECT a.attname,
	    pg_catalog.format_type(a.atttypid, a.atttypmod)
	    , (SELECT substring(pg_catalog.pg_get_expr(d.adbin, d.adrelid, true) for 128)
	                     FROM pg_catalog.pg_attrdef d
	                     WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef)
	                    , a.attnotnull,
	(SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
	                    WHERE c.oid = a.attcollation
	                    AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
	  a.attidentity,
	  a.attgenerated,
	 NULL AS indexdef, NULL AS attfdwoptions, a.attstorage,
	  CASE WHEN a.attstattarget=-1 THEN NULL ELSE a.attstattarget END AS attstattarget,
	  pg_catalog.col_description(a.attrelid, a.attnum) FROM pg_catalog.pg_attribute a WHERE a.attrelid = '16386' AND
	    a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum;
-- next
SELECT c.relchecks, c.relkind, c.relhasindex,
	                    c.relhasrules, c.relhastriggers, false as relhasoids,
	                    '',
	                    c.reltablespace,
	                    CASE WHEN c.reloftype = 0 THEN ''
	                        ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text
	                    END,
	                    c.relpersistence,
	                    c.relispartition
	                 FROM pg_catalog.pg_class c
	                 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
	                 WHERE c.oid = '16393'
-- next
SELECT a.attname,
	    pg_catalog.format_type(a.atttypid, a.atttypmod)
	    , (SELECT substring(pg_catalog.pg_get_expr(d.adbin, d.adrelid, true) for 128)
	                     FROM pg_catalog.pg_attrdef d
	                     WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef)
	                    , a.attnotnull,
	(SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
	                    WHERE c.oid = a.attcollation
	                    AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
	  a.attidentity,
	  a.attgenerated,
	 NULL AS indexdef, NULL AS attfdwoptions FROM pg_catalog.pg_attribute a WHERE a.attrelid = '16393' AND
	    a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum;
-- next
SELECT c.oid::pg_catalog.regclass
	FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
	WHERE c.oid = i.inhparent
	  AND i.inhrelid = '16393'
	ORDER BY inhseqno
-- next
SELECT c.oid::pg_catalog.regclass
	                        FROM pg_catalog.pg_class c,
	                            pg_catalog.pg_inherits i
	                        WHERE c.oid = i.inhrelid
	                            AND i.inhparent = '16393'
	                        ORDER BY c.oid::pg_catalog.regclass::pg_catalog.text;
-- next
SELECT c.relchecks, c.relkind, c.relhasindex,
	                    c.relhasrules, c.relhastriggers, false as relhasoids,
	                    '',
	                    c.reltablespace,
	                    CASE WHEN c.reloftype = 0 THEN ''
	                        ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text
	                    END,
	                    c.relpersistence,
	                    c.relispartition
	                 FROM pg_catalog.pg_class c
	                 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
	                 WHERE c.oid = '16391'
-- next
SELECT a.attname,
	    pg_catalog.format_type(a.atttypid, a.atttypmod)
	    , (SELECT substring(pg_catalog.pg_get_expr(d.adbin, d.adrelid, true) for 128)
	                     FROM pg_catalog.pg_attrdef d
	                     WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef)
	                    , a.attnotnull,
	(SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
	                    WHERE c.oid = a.attcollation
	                    AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
	  a.attidentity,
	  a.attgenerated,
	 CASE WHEN a.attnum <= (SELECT i.indnkeyatts FROM pg_catalog.pg_index i WHERE i.indexrelid = '16391') THEN 'yes' ELSE 'no' END AS is_key,
	 pg_catalog.pg_get_indexdef(a.attrelid, a.attnum, TRUE) AS indexdef, NULL AS attfdwoptions FROM pg_catalog.pg_attribute a WHERE a.attrelid = '16391' AND
	    a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum;
-- next
SELECT i.indisunique,
	                        i.indisprimary,
	                        i.indisclustered,
	                        i.indisvalid,
	                        (NOT i.indimmediate) AND EXISTS (
	                            SELECT 1
	                            FROM pg_catalog.pg_constraint
	                            WHERE conrelid = i.indrelid
	                                AND conindid = i.indexrelid
	                                AND contype IN ('p','u','x')
	                                AND condeferrable
	                        ) AS condeferrable,
	                        (NOT i.indimmediate) AND EXISTS (
	                            SELECT 1
	                            FROM pg_catalog.pg_constraint
	                            WHERE conrelid = i.indrelid
	                                AND conindid = i.indexrelid
	                                AND contype IN ('p','u','x')
	                                AND condeferred
	                        ) AS condeferred,
	                        a.amname,
	                        c2.relname,
	                        pg_catalog.pg_get_expr(i.indpred, i.indrelid, true)
	                        FROM pg_catalog.pg_index i,
	                            pg_catalog.pg_class c,
	                            pg_catalog.pg_class c2,
	                            pg_catalog.pg_am a
	                        WHERE i.indexrelid = c.oid
	                            AND c.oid = '16391'
	                            AND c.relam = a.oid
	                            AND i.indrelid = c2.oid;
-- next
select version()
-- next
WITH Words AS (
	                SELECT regexp_split_to_table(prosrc, '\W+') AS Word, COUNT(1)
	                FROM pg_catalog.pg_proc P
	                JOIN pg_catalog.pg_namespace N ON N.oid = P.pronamespace
	                JOIN pg_catalog.pg_language L ON L.oid = P.prolang
	                WHERE L.lanname IN ('sql', 'plpgsql')
	                AND N.nspname NOT IN ('pg_catalog', 'information_schema')
	                GROUP BY Word
	            ),
	            OrderWords AS (
	                SELECT Word,
	                    ROW_NUMBER() OVER(PARTITION BY LOWER(Word) ORDER BY Count DESC)
	                FROM Words
	                WHERE Word ~* '.*[a-z].*'
	            ),
	            Names AS (
	                --Column names
	                SELECT attname AS Name
	                FROM pg_catalog.pg_attribute
	                UNION -- Table/view names
	                SELECT relname
	                FROM pg_catalog.pg_class
	                UNION -- Function names
	                SELECT proname
	                FROM pg_catalog.pg_proc
	                UNION -- Type names
	                SELECT typname
	                FROM pg_catalog.pg_type
	                UNION -- Schema names
	                SELECT nspname
	                FROM pg_catalog.pg_namespace
	                UNION -- Parameter names
	                SELECT unnest(proargnames)
	                FROM pg_proc
	            )
	            SELECT Word
	            FROM OrderWords
	            WHERE LOWER(Word) IN (SELECT Name FROM Names)
	            AND Row_Number = 1;
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{v,s,""}')
	                 AND n.nspname ~ '^(demo)$'
	                 AND c.relname ~ '^(.*)$'
	            ORDER BY 1, 2
-- next
SELECT c.relchecks, c.relkind, c.relhasindex,
	                    c.relhasrules, c.relhastriggers, false as relhasoids,
	                    '',
	                    c.reltablespace,
	                    CASE WHEN c.reloftype = 0 THEN ''
	                        ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text
	                    END,
	                    c.relpersistence,
	                    c.relispartition
	                 FROM pg_catalog.pg_class c
	                 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
	                 WHERE c.oid = '16405'
-- next
SELECT a.attname,
	    pg_catalog.format_type(a.atttypid, a.atttypmod)
	    , (SELECT substring(pg_catalog.pg_get_expr(d.adbin, d.adrelid, true) for 128)
	                     FROM pg_catalog.pg_attrdef d
	                     WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef)
	                    , a.attnotnull,
	(SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
	                    WHERE c.oid = a.attcollation
	                    AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
	  a.attidentity,
	  a.attgenerated,
	 NULL AS indexdef, NULL AS attfdwoptions FROM pg_catalog.pg_attribute a WHERE a.attrelid = '16405' AND
	    a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum;
-- next
-- params: {"$1": "^(demo)$", "$2": "^(.*)$"}
SELECT  n.nspname as schema,
	                    p.proname as name,
	                    pg_catalog.pg_get_function_result(p.oid)
	                      as "Result data type",
	                    pg_catalog.pg_get_function_arguments(p.oid)
	                      as "Argument data types",
	                     CASE
	                        WHEN p.prokind = 'a' THEN 'agg'
	                        WHEN p.prokind = 'w' THEN 'window'
	                        WHEN p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype
	                            THEN 'trigger'
	                        ELSE 'normal'
	                    END as type 
	            FROM    pg_catalog.pg_proc p
	                    LEFT JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
	                            
	            WHERE   n.nspname ~ $1  AND p.proname ~ $2  ORDER BY 1, 2, 4
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{r,p,""}')
	                 AND n.nspname ~ '^(sales)$'
	                 AND c.relname ~ '^(.*)$'
	            ORDER BY 1, 2
-- next
SELECT n.nspname as schema,
	                    c.relname as name,
	                    CASE c.relkind
	                      WHEN 'r' THEN 'table' WHEN 'v' THEN 'view'
	                      WHEN 'p' THEN 'partitioned table'
	                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
	                      WHEN 'S' THEN 'sequence' WHEN 's' THEN 'special'
	                      WHEN 'f' THEN 'foreign table' END
	                    as type,
	                    pg_catalog.pg_get_userbyid(c.relowner) as owner
	                    
	            FROM    pg_catalog.pg_class c
	                    LEFT JOIN pg_catalog.pg_namespace n
	                      ON n.oid = c.relnamespace
	            WHERE   c.relkind = ANY('{i,s,""}')
	                 AND n.nspname ~ '^(sales)$'
	                 AND c.relname ~ '^(.*)$'
	            ORDER BY 1, 2
