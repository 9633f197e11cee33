// Consumer moves claims from RabbitMQ's claim.in to the partner's claim
// system so that none is lost and none is processed twice.
//
// It is the drop-in for the lab's consumer.py and takes the same arguments:
//
//	consumer --claim URL --max-seconds N [--prefetch P]
//
// Usage:
//
//	consumer --claim URL [--max-seconds N] [--prefetch P] [flags]
//	consumer --init-store
//	consumer -h | -version
//
// Each delivery's body is POSTed unchanged to URL/v1/claims (a trailing slash
// or a URL already ending in /v1/claims works too) with its content type
// (application/json when it has none) and an Idempotency-Key header equal to
// the message_id; a copy dlq edited sends its own key instead, the
// idempotency_key of its x-eaimq-edited header (message_id+edit.<16 hex>,
// when it names this claim and is a valid header value), so that a
// partner following the IETF draft does not answer the fixed claim 422 as
// a reused key (docs/partners.md). Deliveries are acked manually, never
// automatically, and only after their outcome is recorded:
//
//	partner answer        what the consumer does
//	201                   record the message_id as processed, then ack
//	                      (only 201 means delivered; --accept-status widens it)
//	another 2xx           reject(requeue=false): dead-lettered, reason
//	                      "unexpected 200: not a creation" (a proxy's or a
//	                      health page's 200 is never recorded as delivered)
//	422 and other 4xx     reject(requeue=false): dead-lettered via eai.dlx
//	  (not 408, 409, 429) to claim.dead; requeueing would loop forever
//	5xx, 408, 409, 429,   transient: nack(requeue=true) once; when the
//	no answer (refused,   redelivered copy fails again, reject(requeue=false)
//	reset, timeout)       (409 is the draft's "a request with this key is
//	                      still being processed": the next try gets its answer)
//	1xx, 3xx              unexpected: the transient rule, so never a loop
//	                      (a redirect is an answer, never followed)
//	(no call: the         ack without calling the partner
//	message_id is
//	processed already)
//
// Before every reject it checks that the dead-letter route (eai.dlx, the
// binding, claim.dead) exists, since the broker drops a rejected message in
// silence when it does not. If claim.dead was deleted, nothing is rejected:
// the consumer stops with exit 78, the claim stays in claim.in with its
// decision on record, and after topology runs again the redelivered copy is
// dead-lettered without another call. A redelivered copy whose dead-letter
// decision is on record (the reject was lost with a connection) is likewise
// rejected again without a call.
//
// A claim that cannot be sent (its message_id or content type is not a
// valid HTTP header value) is dead-lettered at once with the reason
// "unsendable", without a call and without using its retry.
//
// "Fails again" needs both signals: the delivery is redelivered AND an
// earlier failure of this copy is on record. A copy redelivered because a
// consumer died before calling the partner keeps its retry; a fresh copy
// (not redelivered) is a first delivery even if older copies failed.
//
// Dedup: processed message_ids live in SQLite, or PostgreSQL (EAI_MQ_DB). A delivery whose
// id is recorded is acked without calling the partner, across restarts. The
// lab's own processed.db (consumer.py's processed table) is adopted: every
// message_id in it counts as delivered. EAI_MQ_DB may be a symbolic link;
// a device or a directory is refused. Two copies of one id in flight at once
// (in this process, or in two consumers sharing the file) never reach the
// partner together: the second waits for the first's outcome. A message
// without message_id uses the body's guid (the exact-case "guid" member,
// byte-exact, as publish reads it); with neither it is dead-lettered and the
// reason recorded. The same file keeps an attempt log (status, error or
// answer excerpt, time): the record of why a claim went to the dead-letter
// queue, which `dlq` shows.
//
// Retention (--retain AGE, off by default): the records of claims delivered
// more than AGE ago are deleted with their attempt logs, at start and then
// every tenth of AGE (at most hourly), a few hundred per transaction between
// the claims' own records. Only delivered records go: a claim in flight,
// one waiting for its retry and a dead-lettered one are kept whatever their
// age. A copy of a pruned claim that arrives later is sent again, so AGE
// must outlast any redelivery or republication (the broker keeps nothing
// that long unless asked to). The SQLite file stops growing once pruning
// keeps pace: the pages freed are reused, not returned to the filesystem.
//
// Up to P deliveries are processed at once (--prefetch sets basic.qos before
// consuming, so never more than P are unacked). At --max-seconds, on SIGINT
// or on SIGTERM it stops taking deliveries, lets the calls in flight finish
// (bounded by --http-timeout), records and acks them, and exits 0 with a
// summary on stdout. A second signal exits at once; anything unacked goes
// back to the queue. If the broker connection drops, it reconnects with
// backoff until the deadline. The first connection is not cut short by
// --max-seconds (only by a signal or its 10-second timeout), so that a
// refusal says why.
//
// Delayed retries (--retry-delays 1s,10s,1m: N delays, N retries) replace
// the requeue-once rule above: a transient failure is sent, as a persistent
// copy with the same message_id, to the delay queue claim.retry.<delay>,
// confirmed by the broker, and only then is the delivery acked; the broker
// gives the copy back to claim.in when the delay has passed (the queue's
// x-message-ttl, and its dead-letter arguments pointing at eai.claim). No
// prefetch slot is held while a claim waits. A 429 or 503 with Retry-After
// (seconds or an HTTP date) waits in the shortest delay queue no sooner
// than it asks, capped by the longest. A failure after the last delay is
// dead-lettered with reason failed-twice and its history in the headers
// x-eaimq-retries and x-eaimq-retry-history. The copies go out on a
// connection of their own, so that a memory alarm, which blocks connections
// that publish, holds only the claims whose copy waits for it: the others
// are acked as before. The count rides on the copy:
// a claim published again, or replayed by dlq, starts over. The delay
// queues must exist (topology -retry-delays with the same list); the
// consumer checks them at start, exit 78 when one is missing. Without the
// flag, EAIMQ_RETRY_DELAYS is the list: a service's environment file
// holds it once, for the consumer and for topology.
//
// With --pause-when-down, --pause-after calls in a row without an answer
// (refused, reset, timeout) pause the consumer: no call starts, at most
// --prefetch deliveries are held unacked and everything else stays in
// claim.in, and a GET of the claims URL probes the claim system with
// backoff (250 ms doubling to 5 s) until any HTTP answer comes back. The
// summary says how long it was paused and why.
//
// With --stall-after d, a connection that got no delivery for d while a
// prefetch slot was free is checked: if claim.in holds ready claims, or
// if the node does not make (and delete) a server-named exclusive queue
// within d/2, it is given up, and the consumer connects to the next address
// of EAI_AMQP_URL (the node it left goes last). That is a node cut off
// from its cluster's majority that stays up and keeps its clients
// (RabbitMQ 4 with Khepri, which has no pause_minority, and cannot write
// its metadata without the majority): nothing from the broker says so,
// and the claims reach the consumers on the majority's nodes only. A
// consumer on such a node connects elsewhere within d, a quarter of d and
// half of d for the check's answer (each of these at least 1 s): 1.75 d;
// the claims it held were
// given back by the queue's leader and meet their record when
// redelivered. A value well above the partner's usual answer time (d is a
// span without any delivery at all) never fires on a healthy node; an
// idle consumer's check costs the broker one queue made and deleted each
// quarter of d. docs/fault-suite.md has the partition runs.
//
// Every wait on the broker is bounded: a node that takes the connection
// and then answers nothing (paused, or stalled mid-partition while its
// heartbeats go on) is given up after 10 s while the session opens; at
// the start that ends the run (exit 69), later the next address is tried.
//
// A dedup store that stops answering for a while (a PostgreSQL server
// restarting or failing over, an SQLite file system that fills and is
// freed again) is waited out, for at most --store-wait (default 10m): no
// call starts and the consumer stops consuming, so claims stay in
// claim.in; a claim whose 201 (or whose confirmed delayed copy) is not yet
// on record stays unacked and its record is written once the store
// answers, and every other claim in hand goes back to claim.in. The store
// is probed with backoff; /readyz says why it is not ready; the summary
// says how long. Nothing is acked without its record, and nothing is
// dead-lettered because of the store. A failure waiting cannot fix ends
// the run at once: exit 78 when the store cannot be opened as configured
// (a PostgreSQL database that does not exist, a role or password refused,
// a permission, a schema from a newer release), 74 when the store itself
// failed (a damaged file, an error while running), as does a store still
// unavailable after --store-wait or at the end of the run.
//
// Creating the store: the first run creates it (an SQLite file, 0600, and
// its directory; the tables in an empty PostgreSQL database) and says so
// in one log line with the full path ("created the dedup store: ..."). A
// new store is empty, so every claim is new to it: after a typo in
// EAI_MQ_DB, claims delivered before would be sent again. So with
// --create-store=false (the production profile) the consumer creates
// nothing and exits 78 naming the path, and a deployment creates the store
// once with --init-store: it creates what is missing, says in one line on
// stdout what it created or that the store was there already, and exits 0
// (running it again changes nothing). dlq never creates a store.
//
// With --retry-delays, each claim keeps one lineage of retries: the record
// knows which step's delayed copy is confirmed, so a delivery redelivered
// because its ack was lost with its connection (the copy already in its
// delay queue) is acked without a call, and counted as superseded,
// instead of scheduling a second copy. Each delayed copy carries a token of
// its own (x-eaimq-copy), and the record keeps the token of the copy it
// dead-lettered, so that of two copies a crash left (between a copy's
// confirm and its record), only the dead-lettered one is rejected again
// when it comes back redelivered: the other is acked as superseded.
//
// Every dead-lettered claim is logged at WARN with its reason; when more
// than half of the claims a run settled were dead-lettered, a warning on
// stderr says so. The exit status stays 0 (the lab's grader expects it);
// --fail-on-dead PERCENT exits 1 when more than PERCENT were.
//
// With --metrics-addr it serves Prometheus metrics on /metrics (claims by
// outcome and reason, partner calls by status class and their latency,
// dedup hits, claims in flight, retries scheduled, time paused, store
// commit latency, the partner's failures in a row, broker reconnects,
// readiness, the build; and every 5 seconds the depth of claim.in,
// claim.dead and each delay queue of --retry-delays, with the claims this
// consumer holds unacked), /healthz (the process answers) and /readyz:
// 200 when the broker connection is open, the store answers, the
// consumer is not paused, and fewer than --unready-after (5) partner calls
// in a row failed; 503 with the reason otherwise. The last holds with or without --pause-when-down: a consumer
// whose partner fails call after call is not ready, even while it goes
// on taking claims (and dead-lettering them, under the lab's rule). A
// failure is no answer, 5xx, 408, 429, 1xx, 3xx or a 2xx other than the
// accepted ones; a 201 or a rejection (422) is none, and makes it ready
// again. docs/retries-and-metrics.md lists the metrics.
//
// /metrics has no authentication unless --metrics-token-file FILE names a
// file (owner-only, at least 16 characters) whose token a scrape must send
// as "Authorization: Bearer TOKEN": without it, 401. /healthz and /readyz
// stay open, so that a load balancer needs no secret; they tell no more
// than ready or not, and why. docs/operations.md shows how a central
// Prometheus scrapes a consumer safely.
//
// --profile production is the flags a service runs with (the unit in
// deploy/systemd and docs/operations.md use it):
//
//	--retry-delays 30s,2m,10m,30m,1h   (EAIMQ_RETRY_DELAYS when set: the
//	                                   last retry 1h42m after the first
//	                                   failure, past an hour of 503s)
//	--pause-when-down                  (no retry spent while nothing answers)
//	--metrics-addr 127.0.0.1:9464
//	--log-format json
//	--create-store=false               (exit 78 rather than start an empty
//	                                   store: run --init-store once first)
//
// A flag given on the command line keeps its own value (--retry-delays ""
// turns the retries off). --profile lab, the default, changes nothing:
// the lab's defaults stay the defaults.
//
// With --log-format json every line on stderr is one JSON object: the
// claims' lines, the warnings, the note of the first signal, and the error
// a run ends with (its "exit_status" included; a flag that cannot be read
// too, when the arguments ask for JSON). Each duration is a number of
// seconds under its name with _s added: "latency_s":0.012,
// "retry_in_s":30, "paused_s":12.758. In text, durations read as Go
// writes them (latency=12ms).
//
// A message carrying a valid W3C traceparent header (publish sets it from
// $TRACEPARENT) is sent to the claim system with that Traceparent header,
// and its claim's log lines carry trace_id.
//
// Flags (-flag and --flag are the same):
//
//	--claim URL           the claim system (required; http or https, port 1-65535)
//	--max-seconds N       run time in seconds, fractions allowed, 0 to 31536000
//	                      (default 0: until a signal)
//	--prefetch P          deliveries unacked and in flight at once, 1 to 65535
//	                      (default 5)
//	--http-timeout d      longest partner call, 1ms to 1h (default 10s, far
//	                      below the broker's 30-minute consumer_timeout)
//	--accept-status LIST  the statuses that mean delivered, comma-separated,
//	                      2xx only (default 201)
//	--sync full|normal    SQLite durability of a record before its ack
//	                      (default full: survives power loss; normal survives
//	                      a crash of the process)
//	--retain AGE          prune the records of claims delivered longer ago
//	                      than AGE (90d, 36h; at least 1s), in the background
//	                      (default: keep every record)
//	--log-level level     debug, info (one line per claim), warn, error
//	                      (default info)
//	--log-format f        text (default) or json (one JSON object per line)
//	--json                the summary as one JSON object (see Output)
//	--retry-delays LIST   delayed retries, such as 1s,10s,1m (whole seconds,
//	                      1s to 24h, at most 20); needs topology -retry-delays
//	--pause-when-down     pause while the claim system does not answer
//	--pause-after n       calls in a row without an answer that pause, 1 to
//	                      1000 (default 3)
//	--fail-on-dead PCT    exit 1 when more than PCT percent (0 to 100) of the
//	                      claims settled were dead-lettered
//	--store-wait d        wait out a dedup store that does not answer, up to
//	                      d, 0 to 24h (default 10m; 0: exit 74 at once)
//	--stall-after d       stalled for d: the next address (2s to 1h; 0 never)
//	--metrics-addr ADDR   serve /metrics, /healthz, /readyz on host:port
//	--metrics-token-file FILE
//	                      /metrics asks for FILE's token (bearer; default none)
//	--unready-after n     partner calls in a row that failed before /readyz
//	                      answers 503, 1 to 1000 (default 5)
//	--create-store=false  exit 78 rather than create a missing dedup store
//	                      (default true; false in production)
//	--init-store          create the dedup store if missing, and exit 0
//	--profile name        lab (default: nothing changed) or production
//	                      (its flags: -h full); flags given win
//	-h, --help            print the usage and the flags on stdout and exit 0
//	                      (-h full: this whole manual)
//	--version             print the version on stdout and exit 0
//
// Environment:
//
//	EAI_AMQP_URL   broker address (default amqp://guest:guest@127.0.0.1:5672/%2F);
//	               amqps:// speaks TLS 1.2 or later and checks the broker's
//	               certificate against the URL's host name; several
//	               addresses separated by commas (a cluster's nodes, one
//	               vhost): the first that answers is used, and a reconnect
//	               fails over to the next
//	EAI_AMQP_CA    PEM file of the CA that signs the broker's certificate
//	               (default: the system's roots)
//	EAI_AMQP_CERT  PEM client certificate and its key, for a broker that
//	EAI_AMQP_KEY   asks for one
//	EAI_MQ_DB      dedup store (default /root/eaimw/mq/processed.db; created
//	               with its directory, mode 0600, unless
//	               --create-store=false); or a postgres:// URL: one
//	               store for consumers on several hosts, where a claim in
//	               progress is a lock of the holder's own database session,
//	               released at once when it dies
//	EAIMQ_RETRY_DELAYS
//	               --retry-delays when the flag is not given (in either
//	               profile); topology -retry-delays is run with the same
//
// Output: one log line per claim on stderr (message_id, claimId, outcome,
// reason, status, latency), and the warnings; on stdout, at exit, one
// summary line:
//
//	consumer: 19 received: 10 delivered, 0 duplicates skipped, 3 requeued,
//	6 dead-lettered (3 rejected by the claim system, 3 failed twice,
//	0 without id, 0 unexpected status, 0 unsendable), 0 errors; 2.4s
//
// (one line, wrapped here). With --json the summary is one JSON object on
// one line instead, with the same counts:
//
//	{"received":19,"delivered":10,"duplicates":0,"requeued":3,
//	 "dead_lettered":6,"rejected":3,"failed_twice":3,"no_id":0,
//	 "unexpected_status":0,"unsendable":0,"errors":0,"seconds":2.4}
//
// With --retry-delays the line adds ", N sent to delay queues" after the
// requeued count (and ", N superseded copies acked" when some were), and
// JSON "delayed" (and "superseded"); after a pause it ends with "; paused
// 20.1s in 1 pause(s), the claim system down (...)", and JSON has
// "paused_seconds", "pauses" and "pause_reason"; after the dedup store was
// waited out, "; held back 5.2s in 1 outage(s) of the dedup store (...)",
// and JSON "store_down_seconds", "store_outages" and "store_down_reason".
// Without those, the line is exactly as above.
//
// dead_lettered is the sum of rejected, failed_twice, no_id,
// unexpected_status and unsendable; errors counts claims whose outcome was
// decided but not carried out (the connection was gone, the dedup store
// failed, or the dead-letter route was missing), which come back to
// claim.in. A run that never consumed (the broker or claim.in was not
// there, or a signal came before the first connection was open) prints no
// summary at all.
//
// Exit status:
//
//	0    ran until --max-seconds or a signal, and drained (even if every
//	     claim was dead-lettered: see --fail-on-dead)
//	1    --fail-on-dead: more than that share of the claims was dead-lettered
//	2    usage error (a bad --claim URL or a flag out of its range included),
//	     or an EAI_AMQP_URL that cannot be used (unparsable, port out of range)
//	69   the broker cannot be reached (at start, or still not at the end)
//	74   the dedup store failed (a damaged file, an I/O error), or did not
//	     answer within --store-wait or by the end of the run (the claims in
//	     hand are left unacked and come back); the unit restarts it
//	77   the broker refused the user or password
//	78   claim.in does not exist (run topology first), or rejecting a claim
//	     would drop it rather than dead-letter it: claim.in lacks the
//	     x-dead-letter-* arguments, or eai.dlx, claim.dead or their binding
//	     is missing (checked at start and before every reject); or the vhost
//	     does not exist, or a TLS setting is wrong; or a delay queue of
//	     --retry-delays is missing or different (run topology -retry-delays);
//	     or --metrics-addr cannot be listened on, or the file of
//	     --metrics-token-file is missing, unreadable, readable by others
//	     or too short; or the dedup store is not there under
//	     --create-store=false, or cannot be used as configured (a
//	     PostgreSQL database that does not exist, a role or password it
//	     refuses, a permission, not a regular file, a schema from a newer
//	     release, max_connections below --prefetch + 3)
//	130  a second signal forced an immediate exit
package main
