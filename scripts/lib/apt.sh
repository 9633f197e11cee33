# apt.sh: sourced by mq-up.sh, pg-up.sh and cluster.sh; the one way they
# install what a fresh Debian machine lacks. The caller defines say and die.
#
# apt_install PKG... installs Debian packages as root with a policy-rc.d
# that keeps their postinst from starting services (a RabbitMQ node under
# the machine's hostname with the default config, a PostgreSQL cluster not
# configured yet): the scripts start their own, configured. The
# policy-rc.d this run created, if any, is removed on every way out:
# apt-get failing under set -e, die, a signal. Only that one: a policy-rc.d
# that was there before is the machine's, and stays.

made_policy=
remove_policy() {
	if [ -n "$made_policy" ]; then
		rm -f "$made_policy"
		made_policy=
	fi
}
trap remove_policy EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

apt_install() {
	[ "$(id -u)" -eq 0 ] || die "installing $* needs root (apt-get install $*)"
	# noclobber makes the create exclusive, so a file that appears
	# meanwhile is not taken for ours.
	local policy=${EAIMQ_POLICY_RC:-/usr/sbin/policy-rc.d} # tests point it elsewhere
	if [ ! -e "$policy" ] && (set -C && printf '#!/bin/sh\nexit 101\n' >"$policy") 2>/dev/null; then
		made_policy=$policy
		chmod +x "$policy"
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null || say "apt-get update failed; trying the package lists there are"
	apt-get install -y -q "$@" >/dev/null
	remove_policy
}
