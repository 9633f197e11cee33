// Dlq shows why claims were dead-lettered, and replays, edits, purges or
// restores them without losing one, keeping a record of who did what.
//
// Usage:
//
//	dlq [-json] [-archive|-queue] [-status N|none] [-reason R] [-guid G] [-text T] [-limit N] [-max-held N] list
//	dlq [-json] [-archive|-queue] show ID
//	dlq [-status N|none] [-reason R] [-force] [-max-replays N] [-rate N] [-queue] replay (ID... | -all)
//	dlq [-body FILE] [-queue] edit ID
//	dlq [-status N|none] [-reason R] [-no-archive] [-queue] -yes purge (ID... | -all)
//	dlq [-queue] restore ID...
//	dlq [-json] history [ID]
//	dlq [-addr HOST:PORT] [-read-only] [-refresh D] [-max-replays N] [-no-archive] [-ingest] serve
//	dlq [-batch N] [-max-rows N] [-archive-retention D] [-metrics-addr HOST:PORT] [-archive-queue] ingest
//	dlq -h | -version
//
// Flags may stand anywhere: before the command, after it, among the IDs
// (dlq purge X -yes). After "--" every argument is an ID, even one that
// starts with "-". An ID is a message_id (or, for a message that had none,
// the body's guid or the sha256: key the consumer filed it under, as list
// shows them), or a claimId: one that no message_id answers to and that
// is the claimId of exactly one dead letter names that one; one that is
// the claimId of several names none of them (they are listed, with when
// and why each was dead-lettered, and the exit status is 1). An empty ID
// is a usage error, never "every message without a message_id".
//
// list prints every message of claim.dead as a table, and consumes
// nothing. Its columns: MESSAGE_ID; CLAIM_ID (the body's claimId);
// DEAD-LETTERED, when, and FROM, from which queue (x-death); BROKER, the
// broker's own reason, in full, with its count when it is more than one
// (xN: dead-lettered N times for it, as a replayed claim rejected again
// is); then what the consumer recorded in EAI_MQ_DB: CALLS, the partner
// calls on record; STATUS, the partner's last HTTP status ("-": no answer
// at all, as when it cannot be reached); ANSWER, the partner's last answer
// or the error there was instead, clipped (of a JSON error body, its
// "error" or "message"); and REASON, the reason on record (the -reason
// words below) and its sentence ("unexpected 200: not a creation"). The
// last line says how many were listed of how many looked at; when -limit
// leaves dead letters unlooked-at, it says how many (on stderr with -json):
// of ingested ones, "over 10000" past ten thousand (counting them all
// would read every row).
//
// The broker's reasons (x-death):
//
//	rejected        a consumer rejected it (requeue=false): every decision
//	                of the consumer's to dead-letter a claim
//	delivery_limit  a quorum claim.in delivered it more times than its
//	                delivery limit (RabbitMQ 4: 20 by default) without an
//	                ack or a reject: no consumer decided anything, a
//	                consumer died or lost its connection with it each
//	                time. dlq calls it a crash loop (REASON crash-loop,
//	                -reason crash-loop): not the partner's rejection; fix
//	                the consumer, then replay it
//	expired         it outlived a message TTL (a policy on claim.in)
//	maxlen          it was pushed out of a queue at its max length
//
// -json prints one object per line instead, every field on every line,
// null where there is none: message_id, claim_id, dead_lettered_at,
// from_queue, broker_reason, broker_count (x-death), crash_loop (true for
// delivery_limit), reason (the reason's word on record; "unknown" without
// a record), dead_reason (the recorded sentence), recorded (whether the
// store has a record), state, status, excerpt (the partner's last answer,
// or the error), attempts (partner calls), our_reason (status or error and
// sentence, for people), replays (x-eaimq-replays), deliveries
// (x-delivery-count, on a quorum claim.dead), edit (the x-eaimq-edited
// record of an edited copy: at, by, via, previous_sha256,
// idempotency_key) and purged (the x-eaimq-purged record of a dead letter
// of the archive: at, by, via).
//
// show prints one message: properties, headers (x-death included, one
// field a line), the reason, an edit and its Idempotency-Key, the attempt
// history from the store, and the body. -json prints it as one JSON
// object: list's fields, then content_type, delivery_mode, timestamp,
// app_id, headers, history and body (a body that is not UTF-8 as
// body_base64 instead; the other is null).
//
// Everything printed as text that comes from a message (ids, claimId,
// headers, body, the partner's answer) is made safe for a terminal: control
// characters (ESC, BEL, CR, ..., DEL, C1), the bidirectional-text controls
// and bytes that are not UTF-8 are printed as escapes (\x1b, \u202e), so a
// crafted claim cannot clear the screen or hide what it says. show keeps the
// body's newlines and tabs. Long fields are clipped with their size
// (table columns to their width, show's fields to 256 characters, show's
// body to 64 KiB); -json prints everything, escaped by JSON.
//
// replay puts the selected claims back on eai.claim/claim for another try,
// after the partner or the claim was fixed: a copy with the same body,
// message_id and content type, persistent, with publisher confirms and
// mandatory, without the broker's x-death headers and with its
// x-eaimq-replays count raised by one. The dead copy is acked only after
// the broker confirmed the new one: dying in between leaves a duplicate,
// which the consumer's dedup absorbs, never a loss. A claim the store
// records as delivered is skipped and reported: its dead copy is stale,
// and the way out of the DLQ for it is purge (the line names the command);
// -force replays it anyway, and the partner gets it again. A dead letter
// already replayed -max-replays times is refused (it stays in claim.dead,
// is reported, and the exit status is 1), unless -force: a claim that
// keeps coming back needs a fix (dlq edit), not another try.
//
// edit fixes one claim, as the page's edit and retry does: it opens the
// body (formatted when it is JSON) in $VISUAL, else $EDITOR, else vi, in a
// file only its owner can read, or takes the new body from -body FILE (-
// for stdin). The new body is checked as publish checks a claim file (one
// JSON object of at most 1 MiB whose guid can travel) and must keep the
// guid, which stays the copy's message_id; then it is replayed as replay
// does (confirm before ack; -max-replays does not apply: the edit is the
// fix), with the header x-eaimq-edited: at, by (who), via (dlq edit or dlq
// serve), previous_sha256 (of the body it replaced) and idempotency_key,
// the new Idempotency-Key the consumer sends for it, message_id + "+edit."
// + the first 16 hex digits of the sha256 of the new body (a partner that
// follows the Idempotency-Key draft refuses a key reused with another
// body; dedup still goes by the message_id). claim.dead is given back
// while the editor runs; a dead letter whose body changed meanwhile (it
// was replayed, edited or purged) is not replaced (exit 1). A body the
// editor saved unchanged replays nothing (exit 0); one that fails the
// checks replays nothing (exit 65), and the editor's file is kept for a
// second try, its path said.
//
// One invocation replays each dead letter at most once, even while a
// consumer runs and sends replayed claims the partner rejects again back to
// claim.dead: every command looks only at the messages claim.dead held when
// it started (counted with a passive declare; they are in front of anything
// dead-lettered later), and replay never sends the same message_id twice in
// one run (a second copy is reported and left in claim.dead).
//
// purge moves the selected dead letters to the archive, claim.dead.archive
// (topology declares it, with a retention: 14 days unless
// -archive-retention says otherwise), so that a purge can be undone; it
// needs -yes (without it, it prints what it would archive and exits 2) and
// prints what it archived. Each goes as replay's copies go: a copy
// through the default exchange with publisher confirms and mandatory, the
// message as it is (body, properties, headers, x-death included;
// persistent, without an expiration or user_id), with the header x-eaimq-purged (at, by, via, and the
// x-death's from_queue, reason, dead_lettered_at and count, which list and
// show read when a broker dropped the x-death); the dead letter is acked
// only after the broker confirmed the copy and did not return it. A
// returned or nacked copy leaves its dead letter in claim.dead, is named on
// stderr ("not purged"), and the exit status is 1. When the archive does not
// exist, purge refuses before it touches anything (exit 78, one line: run
// topology, or -no-archive). -no-archive deletes for good instead (ack
// only, as purge did before the archive).
//
// restore moves the named archived dead letters (IDs as for the other
// commands, looked up in claim.dead.archive) back to claim.dead, as they
// were before their purge (x-eaimq-purged taken off), each confirmed in
// claim.dead before it leaves the archive. -archive makes list and show
// read the archive instead of claim.dead: list's REASON then starts with
// when it was purged and by whom, -json has "purged" ({at, by, via}; null
// in claim.dead), and show prints a purged: line. A dead letter past the
// archive's retention is gone for good: restore then names nothing
// (exit 1).
//
// The audit trail: every replay, edit, purge (-yes) and restore of the
// command line and of the page, of one claim or a group, is one JSON line: at,
// who (the named token's name on the page, else the OS user, and who ran
// sudo), via (dlq replay, dlq serve, ...), action, target (what was
// asked: the IDs, -all and the filters, a group), ids (the dead letters
// acted on), not_done (selected or named and not acted on, and why),
// result (done, partial, failed, nothing), error, edit (the
// previous_sha256, sha256 and idempotency_key of an edit), and archive
// (claim.dead.archive for a purge into the archive, null for one for
// good and for the other actions). It is the file
// EAI_MQ_DB-audit.jsonl beside an SQLite store (mode 0600), or the table
// eaimq_audit in a PostgreSQL store's database (created on first use). It
// is checked before the action: an action whose entry could not be written
// is not taken (exit 74). history prints it, oldest first: every entry, or
// those that name ID; -json prints the lines.
//
// serve is the same, as a web page for the people who fix failed claims
// (html/template, no script). A banner on every page names the queue, the
// vhost and the broker's address (never its user or password). Its groups
// page shows the dead letters grouped by reason and last status (rejected
// 422, failed-twice 503, crash-loop, no-id, unexpected-status, unknown),
// each with its count, the partner's answer, the first and last
// dead-lettered time and the first claim ids (all of a group, a page of
// 100 at a time, on its own page). Counting the groups is a walk of
// claim.dead, and the broker holds every message a walk looks at until it
// ends, so the groups are kept and counted again only when an action ran
// since, or claim.dead's depth changed (and not sooner than nine times the
// last walk's duration after it), or they are a minute old, or "Count
// again now" asks; the page says when they were counted, and reloads every
// -refresh. Search finds dead letters whose message_id, guid or claimId
// holds what was typed (letter case aside), a page at a time. A claim's
// page shows its body (JSON formatted), properties, x-death, headers, the
// store's attempt history, its repeated failures, and its history in the
// audit trail. The actions, each behind a confirmation page and a CSRF
// token, run the code of the commands above: retry one claim or a group
// (replay, with -max-replays; claims recorded as delivered are skipped),
// purge one or a group (purge -yes), and edit and retry (edit's checks,
// its header and its new Idempotency-Key; refused when the dead letter's
// body changed since the page showed it). Its Archive page lists the
// purged dead letters of claim.dead.archive (when and by whom each was
// purged), each with a Restore that runs restore (confirmation, CSRF
// token, token and audit as every action); serve -no-archive makes the
// page's purge delete for good. A retry or purge reports what it
// did (replayed, skipped as delivered, refused) and warns when new dead
// letters arrived in claim.dead while it ran. GET /healthz answers 200 and
// {"ok":true,"claim_dead":N,"store":"ok"} when the broker and the store
// answer, else 503 with the error, and needs no token. serve needs the
// store as replay does (or -no-store), walks claim.dead one page or action
// at a time, and stops on Ctrl-C (exit 0).
//
// serve is safe by default: it listens on 127.0.0.1:8088 and answers only
// requests addressed to a loopback name. Any other -addr needs a token:
// EAIMQ_DLQ_TOKEN (one token, named EAIMQ_DLQ_TOKEN in the audit trail),
// or EAIMQ_DLQ_TOKENS, a file of "name token" lines (# comments; readable
// by its owner only; each token its own), so that the trail names the
// person; both may be set. Tokens are at least 16 characters (else serve
// exits 2). Every page and action then answers 401 unless the request
// carries a token (Authorization: Bearer TOKEN, or the cookie the page's
// login form sets); tokens are compared in constant time, and a wrong one
// is logged (what, from where), never its value. -read-only shows no
// action and refuses every one with 403, even a POST made by hand. The
// store's location and the broker's password never reach the page, and
// every field of a claim is escaped: a claim is untrusted input. A POST
// from another site is refused (CSRF token, Sec-Fetch-Site/Origin).
//
// Browsing: every command takes claim.dead's messages with basic.consume,
// a window at a time (basic.qos; at most 500, fewer for large bodies),
// each unacked, and gives them all back when it ends (or dies): nothing is
// consumed and nothing lost, and dlq holds at most a window in memory. A
// command that ends waits (at most 5 s) until claim.dead counts them ready
// again, so that the next one sees them (a quorum queue takes them back
// after the channel closed, not with it). The
// broker holds every message a walk looked at until then, which on a large
// DLQ costs it memory (docs/figures.md), and past its watermark it blocks
// every publisher on the node. So a walk holds at most -max-held dead
// letters (10000 unless set; one that replay or purge moved is not held):
// a walk that stops there says so in one line on stderr, with how many it
// looked at and how many are beyond. -max-held 0 walks them all. On a quorum
// claim.dead each walk also raises every dead letter's delivery count, and
// RabbitMQ 4 drops one past the queue's delivery limit (20 unless set):
// list, replay, purge and the page warn from half of that on.
//
// Ingestion (opt-in): dlq ingest consumes claim.dead into the store's own
// database (EAI_MQ_DB: the consumer's SQLite file or PostgreSQL
// database, table dead_letters), a row per dead letter: its body,
// properties and headers (x-death included) and what the consumer had
// recorded of the claim (reason, status, answer, calls). It runs until
// SIGTERM or SIGINT, then commits the batch in hand, acks it and exits 0;
// serve -ingest runs it inside the page's process. It takes -batch dead
// letters at a time (prefetch twice that), commits them in one
// transaction and only then acks them, one multiple ack: a crash between
// the two redelivers the batch, and a copy already stored (the same
// message_id, copy token, replay count, x-death and body: also the same
// copy dead-lettered twice by the broker) is acked without a second
// row. A message it cannot read whole (a body that is not a JSON object,
// headers of a type it cannot keep) is stored as it came and flagged
// (raw). When the store fails (down, disk full) it stops consuming and
// gives back all it holds, and resumes when the store answers (looked at
// every 5 s); at -max-rows rows it stops taking more and says so on
// stderr, and claim.dead keeps the rest. With -metrics-addr it serves
// eaimq_dlq_ingested_rows, eaimq_dlq_ingest_max_rows,
// eaimq_dlq_ingest_stopped{reason="full"|"store"} (1 while it takes
// nothing), eaimq_dlq_ingested_total and
// eaimq_dlq_ingest_duplicates_total (copies acked without a row). Without dlq ingest claim.dead
// keeps its dead letters, as the lab expects.
//
// Once dead letters were ingested, list and show read them from the
// database (by index: claimId, message_id, reason, status; -limit pages
// by key), the same rows and fields as from the queue, and say in one
// line on stderr what claim.dead still holds that was not ingested;
// -queue acts on claim.dead (and claim.dead.archive) instead. Every
// command looks only at the rows there were when it started, and acts
// by the row's state (dead, replaying, replayed, purged):
//
// replay claims each row first (dead to replaying: one UPDATE whose
// condition on the state lets only one of two replays of a row, the
// command line's and the page's or two pages', have it; the other says
// "another replay took it first" and sends nothing), then publishes its
// copy as above, and marks the row replayed (by whom, through what,
// when; and in the audit trail) only after the broker's confirm. A
// replayed row is not a dead letter any more: replaying it again sends
// nothing. A copy the broker returned or nacked puts its row back to
// dead. A replay that dies between the confirm and the mark leaves the
// row replaying: list shows it, replay skips it and says since when and
// by whom; replay -force takes it again once it has been replaying for a
// minute (a live replay marks its rows within seconds), which may send
// the claim a second time, and the consumer's dedup absorbs that (the
// partner is called once). -rate paces a replay (500 a second unless
// set, 0: no pacing), and a replay that runs longer than a second says
// on stderr how many it replayed so far, once a second. edit replays
// its row the same way.
//
// purge -yes marks the rows purged: they are the archive (list -archive,
// show -archive read them, restore marks them dead again), and
// claim.dead.archive is not used; -no-archive deletes the rows. A row
// being replayed, or replayed or purged by another meanwhile, is not
// purged (exit 1). dlq ingest deletes the rows purged or replayed longer
// than -archive-retention ago (14 days unless set), at its start and
// every hour. dlq ingest -archive-queue, run once, takes what
// claim.dead.archive holds into the store as purged rows (by, via and
// when from each one's x-eaimq-purged header) and exits 0 when the queue
// is empty: how a deployment moves from the archive queue to rows
// (docs/upgrade.md).
//
// Selection: IDs, or -all, or the filters -status N (the last HTTP status
// on record; none: no status on record, no answer or no record at all),
// -reason R (the reason on record), -guid G (the body's guid) and -text
// T (the body holds T, ASCII letter case aside, and each word of T is a
// word of the body: a run of ASCII letters and digits and of non-ASCII
// bytes; -text BUSY-7 finds {"claimId":"BUSY-7"}, -text USY-7 does not).
// Over ingested rows an index serves each of them (claimId and
// message_id, guid, reason, status; for -text an index of each body's
// words: FTS4 in SQLite, a GIN array in PostgreSQL). Filters narrow IDs and -all too;
// list and purge take them alone. The reasons are the store's words:
// delivered, duplicate, retry, rejected, failed-twice (also spelled
// transient), no-id, unexpected-status, unsendable, and unknown for a dead
// letter the store has no record of (or no reason for); and crash-loop,
// the broker's delivery_limit, whatever the record says.
//
// The store: replay, edit, purge, restore and serve refuse to run (exit 74) when
// EAI_MQ_DB cannot be opened or read, since without it every dead letter
// looks "unknown" and -reason unknown would select them all; -no-store
// says there really is none (then nothing can be selected by -status or a
// -reason other than unknown and crash-loop, replay cannot skip delivered
// claims, and there is no audit trail). list and show go on without it,
// with a warning. A failed lookup in an open store ends every command with
// exit 74, and nothing more is done.
//
// Flags:
//
//	-json            list, show, history: JSON instead of text
//	-status N        select by the last HTTP status on record: 100-599, none (no status), 0 (any)
//	-reason R        select by the reason on record (words above)
//	-guid G          select by the body's guid
//	-text T          select the dead letters whose body holds T as whole words
//	-limit N         look at the first N dead letters only: 0 (all, the default) or more
//	-max-held N      a walk holds at most N dead letters unacked: 0 (no bound) or more (default 10000)
//	-queue           act on claim.dead (-archive: claim.dead.archive) even where dead letters were ingested
//	-batch N         ingest, serve -ingest: store and ack N dead letters at a time: 1-10000 (default 200)
//	-max-rows N      ingest, serve -ingest: stop taking more at N rows in the store (default 1000000)
//	-ingest          serve: also run dlq ingest in this process
//	-metrics-addr A  ingest, serve -ingest: serve Prometheus /metrics on A (host:port; default none)
//	-archive-retention D
//	                 ingest, serve -ingest: prune purged and replayed rows after D: 1h or more (default 336h)
//	-archive-queue   ingest: take claim.dead.archive into the store as purged rows, once
//	-all             replay, purge: every dead letter the filters select
//	-force           replay: also claims recorded as delivered, over -max-replays, and rows left replaying
//	-rate N          replay: at most N a second: 0 (no pacing) or more (default 500 over
//	                 ingested rows; over claim.dead, none unless set: the lab's pace)
//	-max-replays N   replay, serve: refuse a dead letter replayed N times already: 1-1000 (default 5)
//	-body FILE       edit: the new body from FILE (- for stdin), not an editor
//	-yes             purge: really purge
//	-no-archive      purge, serve: delete for good instead of moving to claim.dead.archive
//	-archive         list, show: the purged dead letters of claim.dead.archive (ingested: the purged rows)
//	-no-store        read no store: there is none (replay, edit, purge and serve need this to run without one)
//	-addr HOST:PORT  serve: where to listen (default 127.0.0.1:8088); not loopback needs a token
//	-read-only       serve: no action (retry, purge, edit), not even by a hand-made POST
//	-refresh D       serve: the groups page reloads every D: 0 (never) or 1s to 1h (default 5s)
//	-h, -help        print the usage and the flags on stdout and exit 0 (anywhere, as every flag)
//	                 (-h full: this whole manual)
//	-version         print the version on stdout and exit 0
//
// A flag that does nothing for the command (dlq -yes list) is a usage error.
// Flags may be spelled -flag or --flag.
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
//	EAI_MQ_DB      the consumer's store (default /root/eaimw/mq/processed.db;
//	               or its postgres:// URL); the audit trail is beside it
//	EAIMQ_DLQ_TOKEN   serve: a token every request needs (any -addr; a token
//	               is required for one other than loopback)
//	EAIMQ_DLQ_TOKENS  serve: a file of "name token" lines, the same, by name
//	VISUAL, EDITOR edit: the editor (a shell command; the file is its argument)
//	TMPDIR         edit: where the editor's file goes (default /tmp); a
//	               broken edit is kept there for its author
//
// Output: results go to stdout: list's table (and its last line, how many
// were listed of how many looked at) or JSON lines; show's text or JSON
// object; replay's "replayed ID" and "skipped ID: why" lines and its count
// line; edit's replayed line and its Idempotency-Key; purge's
// "archived ID" lines and "purged N dead letter(s) into
// claim.dead.archive" (with -no-archive "deleted ID" lines; without -yes,
// "would archive ID" or "would delete ID" lines); restore's "restored ID"
// lines and "restored N dead letter(s) to claim.dead"; history's entries; serve's "dlq: serving http://ADDR/" line once
// it listens. Errors, warnings, IDs not found or naming several, and dead
// letters not replayed (refused by -max-replays or by the broker) go to
// stderr.
//
// Exit status:
//
//	0    done (for ingest: stopped by SIGTERM or SIGINT, its last batch
//	     stored and acked; for replay: every selected claim replayed, or skipped as
//	     delivered or as replayed already in this run; for edit: also a
//	     body saved unchanged)
//	1    a named ID is not in claim.dead, or is the claimId of several
//	     dead letters (show, replay, edit, purge -yes; restore: not in
//	     claim.dead.archive); or purge's copy was returned or nacked by
//	     the archive, and that dead letter stays in claim.dead; or a replay was
//	     refused, by -max-replays or by the broker (nack or return), and
//	     that dead letter stays in claim.dead; or edit's dead letter
//	     changed or went meanwhile, or its editor failed; or history
//	     has no entry for ID
//	2    usage error, or purge without -yes; or an EAI_AMQP_URL that
//	     cannot be used (unparsable, port out of range); or serve on an
//	     address other than loopback without a token, or a token file
//	     that cannot be used
//	65   edit: the new body is not a claim publish would send, or changes
//	     the guid; nothing was replayed
//	66   edit: the -body FILE does not exist or cannot be read; nothing
//	     was replayed
//	69   the broker cannot be reached
//	74   the store cannot be opened or read (replay, edit, purge, restore, serve, ingest;
//	     any command when a lookup fails); or the audit trail cannot be
//	     written (nothing was done), or could not record what was done
//	75   replay: no confirm in time; the dead letters of that batch stay
//	77   the broker refused the user or password
//	78   claim.dead or eai.claim does not exist: run topology first; or
//	     ingest cannot listen on -metrics-addr; or
//	     purge (without -no-archive) or restore: claim.dead.archive does
//	     not exist (nothing was purged); or
//	     the vhost does not exist, or a TLS setting is wrong; or serve
//	     cannot listen on -addr; or the store's setting is wrong (where
//	     74 would be): a PostgreSQL database or role that does not exist,
//	     a password refused, a permission, not a regular file
//	130  interrupted; every dead letter not yet acted on stays in claim.dead
package main
