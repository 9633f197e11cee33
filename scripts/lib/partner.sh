# partner.sh: sourced by demo.sh and demo-cluster.sh, which define bin.
#
# start_partner PORT LOG [FLAG...] starts the stand-in claim system
# ($bin/claimsys) on 127.0.0.1:PORT in the background, its output in LOG,
# sets partner_pid, and returns once it answers (or exits 1 after 5 s,
# showing its log). A port that something else answers on already is
# refused before anything starts: the demo would talk to that process and
# report claims it never saw.
start_partner() {
	local port=$1 log=$2
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "127.0.0.1:$port is taken by another process; choose a free port with EAIMQ_DEMO_PORT" >&2
		exit 1
	fi
	"$bin/claimsys" -addr "127.0.0.1:$port" "${@:3}" >"$log" 2>&1 &
	partner_pid=$!
	for _ in $(seq 50); do
		if ! kill -0 "$partner_pid" 2>/dev/null; then
			cat "$log" >&2
			echo "claimsys exited at start (see above)" >&2
			exit 1
		fi
		"$bin/claimsys" -stats -addr "127.0.0.1:$port" >/dev/null 2>&1 && return
		sleep 0.1
	done
	cat "$log" >&2
	echo "claimsys did not answer on 127.0.0.1:$port within 5s" >&2
	exit 1
}
