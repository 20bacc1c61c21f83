#!/usr/bin/env bash
# System packages the e2e tests drive for real: the psql binary, a JDK for pgjdbc, and
# psqlODBC + unixODBC for pyodbc. Installs only what is missing, so a warm machine pays nothing.
set -euo pipefail

missing=()
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
[ -e /usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so ] || [ -e /usr/lib/aarch64-linux-gnu/odbc/psqlodbcw.so ] \
  || missing+=(odbc-postgresql)
command -v odbcinst >/dev/null 2>&1 || missing+=(unixodbc)
jar_m2="$HOME/.m2/repository/org/postgresql/postgresql/42.7.13/postgresql-42.7.13.jar"
[ -e "$jar_m2" ] || [ -e /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql-15)

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
