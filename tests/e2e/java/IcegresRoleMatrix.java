import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;

/**
 * Runs each statement given on the command line as a PreparedStatement (pgjdbc's default: the
 * extended protocol) as one login, and prints one line per statement: `N=ok:<rows or count>` or
 * `N=error:<SQLSTATE>:<message>`. Usage: IcegresRoleMatrix url user password sql...
 */
public class IcegresRoleMatrix {
    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0], args[1], args[2])) {
            conn.setAutoCommit(true);
            for (int i = 3; i < args.length; i++) {
                String outcome;
                try (PreparedStatement ps = conn.prepareStatement(args[i])) {
                    if (ps.execute()) {
                        List<String> rows = new ArrayList<>();
                        try (ResultSet rs = ps.getResultSet()) {
                            int columns = rs.getMetaData().getColumnCount();
                            while (rs.next()) {
                                StringBuilder row = new StringBuilder();
                                for (int c = 1; c <= columns; c++) {
                                    if (c > 1) row.append(',');
                                    row.append(rs.getString(c));
                                }
                                rows.add(row.toString());
                            }
                        }
                        outcome = "ok:" + String.join(";", rows);
                    } else {
                        outcome = "ok:" + ps.getUpdateCount();
                    }
                } catch (SQLException e) {
                    outcome = "error:" + e.getSQLState() + ":" + e.getMessage().split("\n")[0];
                }
                System.out.println((i - 3) + "=" + outcome);
            }
        }
        System.out.println("done=true");
    }
}
