import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

/**
 * pgjdbc over TLS (tests/e2e/test_pgwire_tls.py): connects to the URL given (its ssl options as
 * pgjdbc documents them), runs a query and prints key=value lines: the answer, or the SQLSTATE
 * and message of the failure.
 */
public class IcegresTlsCheck {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        try (Connection conn = DriverManager.getConnection(url, props);
             Statement st = conn.createStatement();
             ResultSet rs = st.executeQuery("select count(*) from demo.cities")) {
            rs.next();
            System.out.println("cities=" + rs.getLong(1));
            try (ResultSet ssl = st.executeQuery("show ssl")) {
                ssl.next();
                System.out.println("ssl=" + ssl.getString(1));
            }
        } catch (SQLException e) {
            System.out.println("sqlstate=" + e.getSQLState());
            System.out.println("message=" + String.valueOf(e.getMessage()).replace('\n', ' '));
        }
        System.out.println("done=true");
    }
}
