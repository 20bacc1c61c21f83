import java.sql.*;
import java.time.OffsetDateTime;
import java.util.*;

/**
 * pgjdbc against icegres. Prints one key=value line per fact; the pytest wrapper asserts on them.
 * Usage: java -cp postgresql.jar:. IcegresJdbcCheck <jdbc-url> <user> <pointLookupId>
 * The URL carries prepareThreshold / binaryTransfer options, so one program covers both runs.
 */
public class IcegresJdbcCheck {
    static void out(String key, Object value) {
        System.out.println(key + "=" + value);
    }

    static String typeName(Object v) {
        return v == null ? "null" : v.getClass().getName();
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        long lookupId = Long.parseLong(args[2]);
        long cutoffEpochUs = Long.parseLong(args[3]);
        try (Connection conn = DriverManager.getConnection(url, props)) {
            DatabaseMetaData md = conn.getMetaData();
            out("product", md.getDatabaseProductName());
            out("product_major", md.getDatabaseMajorVersion());

            // Executed 10 times: unnamed until the 5th, then named S_1, and from the 6th only
            // Bind/Execute/Sync with per-column result formats (server must remember the types).
            String sql = "select id, city, fare, distance, pickup_ts, passengers, vendor, paid "
                    + "from demo.trips where id = ?";
            try (PreparedStatement ps = conn.prepareStatement(sql)) {
                for (int i = 0; i < 10; i++) {
                    ps.setLong(1, lookupId + i);
                    try (ResultSet rs = ps.executeQuery()) {
                        int n = 0;
                        while (rs.next()) {
                            n++;
                            String p = "exec" + i + ".";
                            out(p + "id", rs.getLong(1));
                            out(p + "city", rs.getString(2));
                            out(p + "fare", Double.doubleToLongBits(rs.getDouble(3)));
                            out(p + "distance", Double.doubleToLongBits(rs.getDouble("distance")));
                            OffsetDateTime ts = rs.getObject(5, OffsetDateTime.class);
                            out(p + "pickup_epoch_us", ts.toEpochSecond() * 1_000_000L + ts.getNano() / 1000);
                            out(p + "pickup_ts_millis", rs.getTimestamp(5).getTime());
                            out(p + "passengers", rs.getInt(6));
                            out(p + "vendor", rs.getString(7));
                            out(p + "paid", rs.getBoolean(8));
                            out(p + "obj_types", typeName(rs.getObject(1)) + "," + typeName(rs.getObject(2)) + ","
                                    + typeName(rs.getObject(3)) + "," + typeName(rs.getObject(5)) + ","
                                    + typeName(rs.getObject(6)) + "," + typeName(rs.getObject(8)));
                        }
                        out("exec" + i + ".rows", n);
                        if (i == 9) {
                            ResultSetMetaData rmd = rs.getMetaData();
                            StringBuilder names = new StringBuilder();
                            StringBuilder types = new StringBuilder();
                            for (int c = 1; c <= rmd.getColumnCount(); c++) {
                                if (c > 1) { names.append(','); types.append(','); }
                                names.append(rmd.getColumnName(c));
                                types.append(rmd.getColumnTypeName(c));
                            }
                            out("rsmd.names", names);
                            out("rsmd.types", types);
                        }
                    }
                }
            }

            // Aggregate with an int parameter, also past the threshold.
            try (PreparedStatement ps = conn.prepareStatement("select count(*) from demo.trips where id <= ?")) {
                for (int i = 1; i <= 8; i++) {
                    ps.setInt(1, i * 1000);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        out("count" + i, rs.getLong(1));
                    }
                }
            }

            // Parameters of several types in one statement.
            try (PreparedStatement ps = conn.prepareStatement(
                    "select cast(? as bigint) + 1, ? || 'x', cast(? as double precision) * 2, cast(? as boolean)")) {
                for (int i = 0; i < 7; i++) {
                    ps.setLong(1, 41);
                    ps.setString(2, "ab");
                    ps.setDouble(3, 1.25);
                    ps.setBoolean(4, true);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        out("mixed" + i, rs.getLong(1) + "|" + rs.getString(2) + "|" + rs.getDouble(3) + "|" + rs.getBoolean(4));
                    }
                }
            }

            // Timestamp parameters: setObject(OffsetDateTime) is sent as timestamptz, setTimestamp as
            // an untyped (OID 0) text value; both past the threshold.
            java.time.Instant cutoff = java.time.Instant.ofEpochSecond(
                    Math.floorDiv(cutoffEpochUs, 1_000_000L), Math.floorMod(cutoffEpochUs, 1_000_000L) * 1000L);
            try (PreparedStatement ps = conn.prepareStatement(
                    "select count(*) from demo.trips where id <= 1000 and pickup_ts <= ?")) {
                for (int i = 0; i < 7; i++) {
                    ps.setObject(1, OffsetDateTime.ofInstant(cutoff, java.time.ZoneOffset.UTC));
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        out("ts_odt" + i, rs.getLong(1));
                    }
                    ps.setTimestamp(1, Timestamp.from(cutoff));
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        out("ts_sql" + i, rs.getLong(1));
                    }
                }
            }

            // Plain Statement group-by.
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("select city, count(*) as n from demo.trips group by city order by city")) {
                StringBuilder sb = new StringBuilder();
                while (rs.next()) {
                    if (sb.length() > 0) sb.append(';');
                    sb.append(rs.getString(1)).append(':').append(rs.getLong(2));
                }
                out("groupby", sb);
            }

            // Errors carry the SQLSTATE.
            try (Statement st = conn.createStatement()) {
                st.executeQuery("select * from demo.missing");
                out("missing.sqlstate", "none");
            } catch (SQLException e) {
                out("missing.sqlstate", e.getSQLState());
            }

            // DatabaseMetaData.
            try (ResultSet rs = md.getSchemas()) {
                List<String> schemas = new ArrayList<>();
                while (rs.next()) schemas.add(rs.getString("TABLE_SCHEM"));
                out("schemas", String.join(",", schemas));
            }
            try (ResultSet rs = md.getTables(null, "demo", "%", new String[] {"TABLE"})) {
                List<String> tables = new ArrayList<>();
                while (rs.next()) tables.add(rs.getString("TABLE_SCHEM") + "." + rs.getString("TABLE_NAME") + ":" + rs.getString("TABLE_TYPE"));
                out("tables", String.join(",", tables));
            }
            try (ResultSet rs = md.getColumns(null, "demo", "trips", "%")) {
                List<String> cols = new ArrayList<>();
                while (rs.next()) {
                    cols.add(rs.getString("COLUMN_NAME") + ":" + rs.getInt("DATA_TYPE") + ":" + rs.getString("TYPE_NAME")
                            + ":" + rs.getInt("NULLABLE") + ":" + rs.getInt("ORDINAL_POSITION"));
                }
                out("columns", String.join(",", cols));
            }
            try (ResultSet rs = md.getPrimaryKeys(null, "demo", "trips")) {
                List<String> pk = new ArrayList<>();
                while (rs.next()) pk.add(rs.getString("COLUMN_NAME"));
                out("pk", String.join(",", pk));
            }
        }
        out("done", "true");
    }
}
