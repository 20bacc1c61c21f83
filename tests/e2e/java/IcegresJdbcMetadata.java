import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.Statement;

/**
 * What DBeaver, DataGrip and Metabase ask pgjdbc about a result and the server: prints one
 * key=value line per fact, so that the test can compare icegres with PostgreSQL 15.
 * Usage: IcegresJdbcMetadata URL USER
 */
public class IcegresJdbcMetadata {
    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0], args[1], "")) {
            DatabaseMetaData meta = conn.getMetaData();
            String keywords = meta.getSQLKeywords();
            System.out.println("keywords=" + keywords);
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery(
                     "select n, i, b, d, t, v, c, u, n * 2 as twice, count(*) over () as total "
                     + "from jdbcmeta.t")) {
                ResultSetMetaData md = rs.getMetaData();
                for (int c = 1; c <= md.getColumnCount(); c++) {
                    String p = "col" + c + ".";
                    System.out.println(p + "label=" + md.getColumnLabel(c));
                    System.out.println(p + "name=" + md.getColumnName(c));
                    System.out.println(p + "type=" + md.getColumnTypeName(c));
                    System.out.println(p + "precision=" + md.getPrecision(c));
                    System.out.println(p + "scale=" + md.getScale(c));
                    System.out.println(p + "nullable=" + md.isNullable(c));
                    System.out.println(p + "table=" + md.getTableName(c));
                    System.out.println(p + "schema=" + md.getSchemaName(c));
                    System.out.println(p + "displaysize=" + md.getColumnDisplaySize(c));
                    System.out.println(p + "class=" + md.getColumnClassName(c));
                    System.out.println(p + "sqltype=" + md.getColumnType(c));
                }
                while (rs.next()) {
                    System.out.println("row.c=[" + rs.getString("c") + "]");
                }
            }
        }
    }
}
