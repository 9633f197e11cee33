#!/usr/bin/env bash
# pg-up.sh: make sure a PostgreSQL server answers on 127.0.0.1:5432 and lets
# user postgres in over loopback TCP without a password, as the tests need
# (each test creates its own database there and drops it; see
# internal/pgtest). Safe to run any number of times.
#
#   scripts/pg-up.sh
#
# If a server already answers, it changes nothing: it checks that the tests
# can log in (as $EAIMQ_TEST_PG_URL, default
# postgres://postgres@127.0.0.1:5432/postgres) and says what to do if not.
# Otherwise, as root, it installs Debian's postgresql when missing (without
# letting the package start a server of its own), creates the cluster
# "<newest version> main" when there is none, sets its port to 5432, lets
# postgres in from 127.0.0.1 with trust authentication (one line at the top
# of its pg_hba.conf, marked "eaimq"), starts it, and waits until it
# answers. Trust means any local user can connect as postgres over TCP:
# that is for a test machine, not for one that keeps real claims.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

port=5432
url=${EAIMQ_TEST_PG_URL:-postgres://postgres@127.0.0.1:$port/postgres}
wait_s=${EAIMQ_PG_WAIT:-60}
marker="# eaimq: scripts/pg-up.sh lets the tests in as postgres over loopback TCP"

say() { echo "pg-up: $*"; }
die() { echo "pg-up: $*" >&2; exit 1; }

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

# The tests log in without a password; psql -w never asks for one.
can_log_in() { psql "$url" -w -X -q -A -t -c 'SELECT 1' >/dev/null 2>&1; }

. "$here/lib/apt.sh" # apt_install, and the trap that cleans up after it

install_server() {
	say "PostgreSQL is not installed; installing it from Debian"
	apt_install postgresql
	newest_version >/dev/null || die "no PostgreSQL server in /usr/lib/postgresql after apt-get install postgresql"
}

# newest_version prints the newest server version installed (15, 16, ...).
newest_version() {
	local v
	v=$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sed 's|^/usr/lib/postgresql/||; s|/.*||' | sort -n | tail -n 1)
	[ -n "$v" ] || return 1
	echo "$v"
}

if answers; then
	say "a server already answers on 127.0.0.1:$port; not starting another"
	if command -v psql >/dev/null && ! can_log_in; then
		die "but it does not let the tests in without a password as $(sed -E 's|//([^:@/]*):[^@/]*@|//\1:xxxxx@|' <<<"$url"):
  add the line
    host all postgres 127.0.0.1/32 trust
  at the top of its pg_hba.conf and reload it (pg_ctlcluster VERSION main reload),
  or point EAIMQ_TEST_PG_URL at a server and user the tests may use (it needs CREATEDB)"
	fi
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "nothing answers on 127.0.0.1:$port, and starting PostgreSQL needs root"
if ! command -v pg_ctlcluster >/dev/null || ! newest_version >/dev/null; then
	install_server
fi
version=$(newest_version)
conf=/etc/postgresql/$version/main

if [ ! -e "$conf/postgresql.conf" ]; then
	say "creating cluster $version main"
	pg_createcluster --port "$port" "$version" main >/dev/null
fi
if [ "$(pg_conftool -s "$version" main show port 2>/dev/null || echo "$port")" != "$port" ]; then
	say "setting the port of cluster $version main to $port"
	pg_conftool "$version" main set port "$port"
fi
hba=$(pg_conftool -s "$version" main show hba_file 2>/dev/null || echo "$conf/pg_hba.conf")
if ! grep -qF "$marker" "$hba"; then
	say "letting postgres in from 127.0.0.1 without a password ($hba)"
	# First match wins in pg_hba.conf: the line goes before any other.
	{ echo "$marker"; echo "host all postgres 127.0.0.1/32 trust"; cat "$hba"; } >"$hba.eaimq"
	chown --reference="$hba" "$hba.eaimq"
	chmod --reference="$hba" "$hba.eaimq"
	mv "$hba.eaimq" "$hba"
fi

# A cluster that runs but does not answer here (another port, say) takes
# the new settings on a restart.
if pg_lsclusters -h "$version" main 2>/dev/null | grep -q online; then
	say "restarting cluster $version main"
	pg_ctlcluster --skip-systemctl-redirect "$version" main restart
else
	say "starting cluster $version main"
	pg_ctlcluster --skip-systemctl-redirect "$version" main start
fi
deadline=$((SECONDS + wait_s))
until pg_isready -q -h 127.0.0.1 -p "$port"; do
	if [ $SECONDS -ge $deadline ]; then
		die "cluster $version main did not answer on 127.0.0.1:$port within ${wait_s}s; see /var/log/postgresql/postgresql-$version-main.log"
	fi
	sleep 1
done
can_log_in || die "cluster $version main answers, but user postgres cannot log in over 127.0.0.1 without a password; see $hba"
say "PostgreSQL $version answers on 127.0.0.1:$port (user postgres, trust)"
