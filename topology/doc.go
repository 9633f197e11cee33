// Topology declares the claim relay's exchanges, queues and bindings in the
// vhost of EAI_AMQP_URL, or with -check verifies them and changes nothing.
//
// It is the drop-in for the lab's topology.py and takes the same (no)
// arguments. Running it twice is safe: redeclaring an object with the same
// properties does nothing.
//
// Usage:
//
//	topology [-check [-strict]] [-json] [-queue-type classic|quorum] [-archive-retention d] [-timeout d]
//	topology -migrate classic|quorum [-timeout d]
//	topology -h | -version
//
// What it declares, in this order (the dead-letter side first, so that
// claim.in never names a dead-letter exchange that does not exist yet):
//
//	exchange eai.dlx     direct, durable
//	exchange eai.claim   direct, durable
//	queue    claim.dead  durable
//	queue    claim.in    durable, x-dead-letter-exchange=eai.dlx,
//	                     x-dead-letter-routing-key=claim.dead
//	binding  eai.claim -> claim.in   key claim
//	binding  eai.dlx   -> claim.dead key claim.dead
//
// and then, after the lab's objects, the archive of dlq purge:
//
//	queue    claim.dead.archive  durable, x-message-ttl=1209600000
//
// dlq purge moves a dead letter there instead of deleting it, and dlq
// restore brings it back to claim.dead, for as long as the archive keeps it:
// its x-message-ttl is -archive-retention (default 336h, 14 days, in ms),
// and a message past it is dropped (the archive has no dead-letter
// exchange). It is bound to no exchange: dlq publishes to it through the
// default exchange. With -queue-type quorum it is a quorum queue with
// claim.dead's delivery limit (x-queue-type=quorum,
// x-delivery-limit=2147483647). An archive of the other type with the same
// retention is kept as it is, with a warning on stderr (-migrate moves
// claim.in and claim.dead, not the archive, whose claims are purged ones).
// -archive-retention 0 declares (and -check checks) no archive; dlq purge
// then refuses unless -no-archive.
//
// With -queue-type quorum, claim.in and claim.dead are quorum queues,
// replicated over the nodes of a cluster (scripts/cluster.sh starts a
// local one); the lab's single node takes them too:
//
//	queue    claim.dead  durable, x-queue-type=quorum,
//	                     x-delivery-limit=2147483647
//	queue    claim.in    durable, x-queue-type=quorum,
//	                     x-dead-letter-exchange=eai.dlx,
//	                     x-dead-letter-routing-key=claim.dead,
//	                     x-dead-letter-strategy=at-least-once,
//	                     x-overflow=reject-publish,
//	                     x-delivery-limit=20
//
// At-least-once dead-lettering keeps a rejected claim in claim.in until
// claim.dead has confirmed it (the default drops it from claim.in first,
// and a node failing in between loses it); the broker does it only for a
// queue with x-overflow=reject-publish.
//
// A quorum queue counts every return of a message (a nack with requeue, a
// channel or connection closed with it unacked) and at its delivery limit
// dead-letters it, or drops it when the queue has no dead-letter exchange.
// RabbitMQ 3.x sets no limit, 4.x a default of 20; topology sets one
// explicitly, the same on both. claim.in's is 20: the consumer returns a
// claim at most once itself (the requeue-once rule), so 20 returns are a
// crash loop, and the claim is dead-lettered to claim.dead with the
// x-death reason delivery_limit, to be replayed with dlq, instead of
// taking the consumers down again and again. claim.dead has no
// dead-letter exchange and dlq returns every dead letter it reads, so its
// limit is as high as every version takes (2147483647; 4.x's -1, "no
// limit", makes 3.x drop a message at its first return). Classic queues
// have no delivery limit on any version.
//
// Quorum queues declared before topology set the limit (their arguments
// cannot change in place) are kept as they are, with a warning on stderr
// and "kept_without_delivery_limit" in -json, rather than failing with
// 406: -check reports them, and -migrate quorum, or a policy with
// delivery-limit (docs/upgrade.md), gives them the limit.
//
// If an object already exists with other properties, the broker answers
// 406 PRECONDITION_FAILED; topology prints which property differs, what it
// wants, and what to do, and exits 78. When the difference is the queue
// type (claim.in is a classic queue and -queue-type quorum was asked, or
// the other way round), it says so, with how many claims the queue holds,
// and gives the plan: stop the consumers, then run topology -migrate. It
// never deletes a queue. An archive with another retention is the same
// 406: the message says to give -archive-retention the value it was
// declared with (the broker's "current is", in ms), or to restore what it
// holds before deleting it.
//
// With -migrate TYPE it moves claim.dead, then claim.in, to queues of that
// type, claims and all, losing none; -migrate quorum also moves a quorum
// queue declared without its delivery limit to one with it. A queue's type cannot be changed in
// place, so each goes through a temporary queue of the new type,
// NAME.migrating: it is bound as NAME is, NAME is unbound (new claims now
// land in the temporary queue), every message is moved into it, NAME is
// deleted only when empty and declared again with the new type, bound, the
// temporary queue unbound, and everything moved back; the temporary queue
// is deleted when empty. A message is moved by basic.get, a publish of the
// same body, properties and headers (x-death included) with publisher
// confirms and the mandatory flag, and an ack of the original only once
// the copy is confirmed and not returned: a claim is always in one of the
// two queues. Every step is idempotent and chosen from what exists, so a
// migration that stopped midway (a crash, a signal, a lost connection) is
// finished by running the same command again. A crash inside a batch of
// 100 can leave up to 100 claims in both queues with one message_id; the
// consumer's dedup record absorbs them. So can a stop while taking from a
// quorum queue: RabbitMQ may drop acks that reach a quorum queue just
// before their channel closes (rabbitmq-server#10327) and return claims
// whose copies are already confirmed. A claim published at the instant two
// queues are bound is routed to both, and absorbed the same way. Moved
// messages lose only the broker's redelivered flag. It prints its progress
// and, last, "moved N claim(s)".
//
// -migrate refuses before changing anything (exit 78, "stop the consumers
// first") when a consumer is attached to claim.in or claim.dead: it would
// race the move. It holds an exclusive queue, claim.migrating.lock, while
// it runs; a second -migrate in the same vhost, or one started while the
// broker still holds the connection of a run that died, exits 75.
//
// With -check it declares nothing new: a passive declare tells whether each
// exchange and queue exists, an existing one is redeclared with the wanted
// properties (a no-op when they match, a 406 when they differ), and the
// bindings are read with rabbitmqctl list_bindings when the broker is on this
// machine (AMQP 0-9-1 cannot list them). Each missing or differing piece is
// reported on its own line. -check checks the queues of -queue-type (classic
// by default): a quorum queue's line shows x-queue-type=quorum, and a queue
// of the other type is reported as such ("a quorum queue, not classic
// (N ready); topology -migrate classic moves it, claims and all"). A quorum
// queue declared without its delivery limit is ok, and says so. A missing
// claim.dead.archive is a line starting "warn", not a problem (the lab's
// contract holds without it; dlq purge refuses until it exists); one that
// differs from -archive-retention is a PROBLEM.
//
// -check is also a pre-upgrade check: after the contract's lines, lines
// starting "4.x:" say what would change or break on RabbitMQ 4.x for the
// deployment it is pointed at (docs/upgrade.md):
//
//	the broker's version (from AMQP's connection.start; every node's
//	  from rabbitmqctl cluster_status) and the upgrade path from it: a
//	  rolling upgrade cannot skip a minor version, so 3.10 goes through
//	  3.11.18, 3.12 and 3.13, or to a new 4.x cluster;
//	stable feature flags still disabled, and khepri_db on 3.13;
//	queues covered by a classic mirroring (ha-*) policy: 4.x has none;
//	quorum queues without an explicit delivery limit (argument, policy
//	  or operator policy), where 4.x's default of 20 dead-letters, or
//	  drops; and quorum queues that dead-letter at most once;
//	transient non-exclusive queues, and channels with global QoS (3.12
//	  and older) or the deprecated features in use (3.13 and later);
//	a max_message_size below publish's default -max-bytes (16 MiB), and
//	  the consumer_timeout.
//
// What AMQP cannot see is read with rabbitmqctl (EAIMQ_RABBITMQCTL, else
// the node on this machine that listens on the URL's port); a note says
// what could not be checked. The findings are warnings: they never change
// the contract's result or its exit status; with -strict, a check whose
// contract is sound exits 1 when there is one.
//
// Flags (-flag and --flag are the same):
//
//	-check       verify the topology and change nothing; then the
//	             pre-upgrade check for RabbitMQ 4.x
//	-strict      with -check: exit 1 when the pre-upgrade check warns
//	-json        print the result as one JSON object (see Output)
//	-queue-type t
//	             classic (default) or quorum: the type of claim.in and
//	             claim.dead, to declare or to -check
//	-migrate t   move claim.in and claim.dead, with their claims, to type
//	             t (classic or quorum); not with -check or -json, and
//	             -queue-type, if given, must be the same
//	-archive-retention d
//	             claim.dead.archive keeps a purged dead letter for d
//	             (x-message-ttl): 0 (no archive) or 1m to 1176h, 49 days,
//	             under RabbitMQ's largest TTL (default 336h, 14 days);
//	             not with -migrate, which leaves the archive as it is
//	-retry-delays LIST
//	             also declare the consumer's delay queues for its
//	             --retry-delays LIST (such as 1s,10s,1m), of -queue-type, or
//	             -check them; not with -migrate
//	-timeout d   longest wait for the connection: TCP connect and the TLS
//	             and AMQP handshakes together (default 10s; 0 or less
//	             also means 10s); then, again, the longest wait for the
//	             declares: a node that took the connection and stopped
//	             answering is left with exit 69 (not -check, -migrate)
//	-h, -help    print the usage and the flags on stdout and exit 0
//	             (-h full: this whole manual)
//	-version     print the version on stdout and exit 0
//
// Environment:
//
//	EAI_AMQP_URL   broker address (default amqp://guest:guest@127.0.0.1:5672/%2F);
//	               amqps:// speaks TLS 1.2 or later and checks the broker's
//	               certificate against the URL's host name; several
//	               addresses separated by commas (a cluster's nodes, one
//	               vhost): the first that answers is used
//	EAI_AMQP_CA    PEM file of the CA that signs the broker's certificate
//	               (default: the system's roots)
//	EAI_AMQP_CERT  PEM client certificate and its key, for a broker that
//	EAI_AMQP_KEY   asks for one
//
// No message shows the password of EAI_AMQP_URL, however the URL is
// malformed. A connection that fails says on its first line what to do.
//
// Output: errors go to stderr, results to stdout. A declaration prints one
// line,
//
//	topology: declared 2 exchanges, 2 queues, 2 bindings in vhost "/" (amqp://guest:xxxxx@127.0.0.1:5672/%2F)
//
// ("2 quorum queues" with -queue-type quorum), then a line for the archive
// (none with -archive-retention 0),
//
//	topology: declared the archive queue claim.dead.archive: dlq purge keeps a claim there for 14 days (dlq restore brings it back)
//
// and with -retry-delays a line naming the delay queues:
//
//	topology: declared 3 delay queue(s) for consumer --retry-delays 1s,10s,1m: claim.retry.1s, claim.retry.10s, claim.retry.1m
//
// Each delay queue claim.retry.<delay> is durable, with x-message-ttl (the
// delay in ms), x-dead-letter-exchange=eai.claim and
// x-dead-letter-routing-key=claim: a claim waits there, unconsumed, and
// the broker sends it back to claim.in when its delay has passed. With
// -queue-type quorum they are quorum queues that dead-letter at least once
// (x-dead-letter-strategy=at-least-once, x-overflow=reject-publish), as
// claim.in is. -json adds "delay_queues":N. A migration one line per
// step and a last line
//
//	topology: migrated claim.in and claim.dead to quorum queues in vhost "/": moved 1050 claim(s)
//
// and -check one line per object, starting with "ok" or "PROBLEM", then the
// object as the contract wants it and what is wrong with it:
//
//	ok      exchange eai.dlx (direct, durable)
//	PROBLEM binding eai.dlx -> claim.dead (key claim.dead): missing (run topology)
//
// and a line starting with "note" when the bindings could not be verified
// (the broker is not on this machine, or rabbitmqctl failed). Then the
// pre-upgrade check's lines, starting "ok", "warn" or "note", and "4.x:":
//
//	ok      4.x: broker RabbitMQ 3.10.8: nodes: rabbit@localhost 3.10.8
//	warn    4.x: upgrade path: 3.10.8 cannot become 4.x in one step: ...
//	warn    4.x: classic mirrored queues: policy mirror (ha-mode=all) mirrors claim.dead, claim.in: ...
//
// A failed declaration prints nothing on stdout; a check that cannot finish (the
// connection is lost) stops after the lines printed so far.
//
// With -json, stdout holds one JSON object on one line instead. After a
// declaration:
//
//	{"vhost":"/","declared":{"exchanges":2,"queues":2,"bindings":2},
//	 "archive":{"queue":"claim.dead.archive","retention_ms":1209600000}}
//
// After -check, whether it found problems (exit 78) or not (exit 0); ok is
// true when every item is, and notes is there only when there are notes:
//
//	{"vhost":"/","ok":false,"items":[{"what":"exchange eai.dlx (direct, durable)",
//	 "ok":true,"detail":""},...,{"what":"binding eai.dlx -> claim.dead (key claim.dead)",
//	 "ok":false,"detail":"missing (run topology)"}],"notes":["bindings not verified: ..."],
//	 "upgrade":{"broker":"RabbitMQ 3.10.8","version":"3.10.8","ok":false,
//	 "items":[{"what":"4.x: upgrade path","ok":false,"detail":"..."},...],"notes":[...]}}
//
// (upgrade.ok is false when a finding warns; it never changes ok. A
// missing archive is an item with "ok":false and "warn":true, and does not
// change ok either.)
//
// When the declaration fails or the check cannot finish, -json prints
// nothing on stdout; the error is on stderr.
//
// Exit status:
//
//	0    declared (or, with -check, everything is as the contract says,
//	     whatever the pre-upgrade check found; with -migrate, both queues
//	     are of the type asked)
//	1    -check -strict: the contract is sound, but the pre-upgrade check
//	     warns of something RabbitMQ 4.x would change or break
//	2    usage error (an unknown -queue-type or -migrate type, -migrate
//	     with -check, -json, -archive-retention or another -queue-type,
//	     -strict without -check, -archive-retention out of range), or an EAI_AMQP_URL that cannot be used (unparsable,
//	     port out of range)
//	69   the broker cannot be reached: refused, unreachable, no answer
//	     within -timeout, or amqps:// against a port that does not speak TLS;
//	     or -migrate stopped midway on a broker error (run it again)
//	75   -migrate: another migration holds the vhost's lock, or the broker
//	     still holds a stopped one's connection (run it again later)
//	77   the broker refused the user or password
//	78   an object differs from the contract (406), or the user may not
//	     declare it (403), or -check found one missing or different; or
//	     the vhost does not exist; or a TLS setting is wrong (the broker's
//	     certificate is not trusted or not valid for the URL's host, a
//	     certificate file cannot be read); or claim.in or claim.dead exists
//	     with the other queue type (the message has the -migrate plan); or
//	     -migrate found a consumer attached ("stop the consumers first") or
//	     a queue that matches neither type
//	130  interrupted (SIGINT, SIGTERM) while connecting, or during -migrate
//	     (between two batches; run it again to finish)
package main
