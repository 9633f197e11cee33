# partner.sh: sourced by demo.sh and demo-cluster.sh, which define bin.
#
# start_partner PORT LOG [FLAG...] starts the stand-in claim system
# ($bin/claimsys) on 127.0.0.1:PORT in the background, its output in LOG,
# sets partner_pid, and returns once it answers (or exits 1 after 5 s,
# showing its log).
start_partner() {
	local port=$1 log=$2
	"$bin/claimsys" -addr "127.0.0.1:$port" "${@:3}" >"$log" 2>&1 &
	partner_pid=$!
	for _ in $(seq 50); do
		"$bin/claimsys" -stats -addr "127.0.0.1:$port" >/dev/null 2>&1 && return
		sleep 0.1
	done
	cat "$log" >&2
	echo "claimsys did not answer on 127.0.0.1:$port within 5s" >&2
	exit 1
}
