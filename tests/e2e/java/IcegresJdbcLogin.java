import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

/**
 * One pgjdbc login, as an application makes it: user and password as connection properties.
 *
 * Usage: java -cp postgresql.jar:. IcegresJdbcLogin <jdbc-url> <user> <password>
 * Prints "login=ok", "current_user=..." on success, or "sqlstate=..." and "message=..." when the
 * driver refuses (the exit status is 0 either way: the test reads the lines).
 */
public class IcegresJdbcLogin {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        try (Connection c = DriverManager.getConnection(args[0], props);
             Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("select current_user, 1 + 1")) {
            rs.next();
            System.out.println("login=ok");
            System.out.println("current_user=" + rs.getString(1));
            System.out.println("two=" + rs.getInt(2));
        } catch (SQLException e) {
            System.out.println("sqlstate=" + e.getSQLState());
            System.out.println("message=" + e.getMessage().replace('\n', ' '));
        }
    }
}
