// Dlq shows why claims were dead-lettered, and replays or purges them
// without losing one.
//
// Usage:
//
//	dlq [-json] [-status N] [-reason R] [-limit N] list
//	dlq [-json] show ID
//	dlq [-status N] [-reason R] [-force] [-max-replays N] replay (ID... | -all)
//	dlq [-status N] [-reason R] -yes purge (ID... | -all)
//	dlq [-addr HOST:PORT] [-read-only] [-refresh D] [-max-replays N] serve
//	dlq -h | -version
//
// Flags may stand anywhere: before the command, after it, among the IDs
// (dlq purge X -yes). After "--" every argument is an ID, even one that
// starts with "-". IDs are message_ids (or, for a message that had none,
// the body's guid or the sha256: key the consumer filed it under, as list
// shows them); an empty ID is a usage error, never "every message without
// a message_id".
//
// list prints every message of claim.dead as a table, and consumes nothing:
// message_id, claimId, when and from which queue it was dead-lettered and
// the broker's reason and count (x-death), the number of partner calls, and
// our reason as the consumer recorded it in EAI_MQ_DB: the reason's word
// (the -reason words below) and its sentence ("unexpected 200: not a
// creation"). -json prints one object per line instead, with the fields
// message_id, claim_id, dead_lettered_at, from_queue, broker_reason,
// broker_count, reason, dead_reason (the recorded sentence), recorded
// (whether the store has a record), state, status, excerpt, attempts,
// our_reason (status or error and sentence, for people) and replays. When
// -limit leaves dead letters unlooked-at, list says how many (on stderr
// with -json).
//
// show prints one message: properties, headers (x-death included, one
// field a line), the attempt history from the store, and the body. -json
// prints it as one JSON object instead (a body that is not UTF-8 as
// body_base64).
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
// records as delivered is skipped and reported, unless -force. A dead
// letter already replayed -max-replays times is refused (it stays in
// claim.dead, is reported, and the exit status is 1), unless -force: a
// claim that keeps coming back needs a fix, not another try.
//
// One invocation replays each dead letter at most once, even while a
// consumer runs and sends replayed claims the partner rejects again back to
// claim.dead: every command looks only at the messages claim.dead held when
// it started (counted with a passive declare; they are in front of anything
// dead-lettered later), and replay never sends the same message_id twice in
// one run (a second copy is reported and left in claim.dead).
//
// purge deletes the selected dead letters; it needs -yes (without it, it
// prints what it would delete and exits 2) and prints what it deleted.
//
// serve is the same, as a web page for the people who fix failed claims
// (html/template, no script). Its groups page shows the dead letters
// grouped by recorded reason and last status (rejected 422, failed-twice
// 503, no-id, unexpected-status, unknown), each with its count, the
// partner's answer, the first and last dead-lettered time and the claim
// ids, and reloads every -refresh. A claim's page shows its body (JSON
// formatted), properties, x-death, headers, the store's attempt history
// and its repeated failures. The actions, each behind a confirmation page
// and a CSRF token, run the code of the commands above: retry one claim or
// a group (replay, with -max-replays; claims recorded as delivered are
// skipped), purge one or a group (purge -yes), and edit and retry: the
// edited body is checked as publish checks a claim file (one JSON object
// of at most 1 MiB whose guid can travel; the guid must stay the claim's
// message_id), then published with the same message_id and an
// x-eaimq-edited header (when, by what, the sha256 of the body it
// replaced), and the dead copy is acked only after the broker confirmed
// the edited one. An edited dead letter shows as edited. A retry or purge
// reports what it did (replayed, skipped as delivered, refused) and warns
// when new dead letters arrived in claim.dead while it ran. serve needs the
// store as replay does (or -no-store), walks claim.dead once per page and
// action, one at a time, and stops on Ctrl-C (exit 0).
//
// serve is safe by default: it listens on 127.0.0.1:8088 and answers only
// requests addressed to a loopback name. Any other -addr needs
// EAIMQ_DLQ_TOKEN (at least 16 characters; without it serve exits 2), and
// then every page and action answers 401 unless the request carries the
// token (Authorization: Bearer TOKEN, or the cookie the page's login form
// sets). -read-only shows no action and refuses every one with 403, even a
// POST made by hand. The store's location and the broker's password never
// reach the page, and every field of a claim is escaped: a claim is
// untrusted input. A POST from another site is refused (CSRF token,
// Sec-Fetch-Site/Origin).
//
// Selection: IDs, or -all, or the filters -status N (the last HTTP status
// on record) and -reason R (the reason on record). Filters narrow IDs and
// -all too; list and purge take them alone. The reasons are the store's
// words: delivered, duplicate, retry, rejected, failed-twice (also spelled
// transient), no-id, unexpected-status, unsendable, and unknown for a dead
// letter the store has no record of (or no reason for).
//
// The store: replay and purge refuse to run (exit 74) when EAI_MQ_DB cannot
// be opened or read, since without it every dead letter looks "unknown" and
// -reason unknown would select them all; -no-store says there really is
// none (then nothing can be selected by -status or a -reason other than
// unknown, and replay cannot skip delivered claims). list and show go on
// without it, with a warning. A failed lookup in an open store ends every
// command with exit 74, and nothing more is done.
//
// Flags:
//
//	-json            list, show: JSON instead of text
//	-status N        select by the last HTTP status on record: 100-599 (0: any)
//	-reason R        select by the reason on record (words above)
//	-limit N         look at the first N dead letters only: 0 (all, the default) or more
//	-all             replay, purge: every dead letter the filters select
//	-force           replay: also claims recorded as delivered, and over -max-replays
//	-max-replays N   replay, serve: refuse a dead letter replayed N times already: 1-1000 (default 5)
//	-yes             purge: really delete
//	-no-store        read no store: there is none (replay, purge and serve need this to run without one)
//	-addr HOST:PORT  serve: where to listen (default 127.0.0.1:8088); not loopback needs EAIMQ_DLQ_TOKEN
//	-read-only       serve: no action (retry, purge, edit), not even by a hand-made POST
//	-refresh D       serve: the groups page reloads every D: 0 (never) or 1s to 1h (default 5s)
//	-h, -help        print this manual on stdout and exit 0 (anywhere, as every flag)
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
//	               or its postgres:// URL)
//	EAIMQ_DLQ_TOKEN  serve: the token every request needs (any -addr; required
//	               for one other than loopback)
//
// Output: results go to stdout: list's table (and its last line, how many
// were listed of how many looked at) or JSON lines; show's text or JSON
// object; replay's "replayed ID" and "skipped ID: why" lines and its count
// line; purge's "deleted ID" lines and "purged N dead letter(s)" (without
// -yes, "would delete ID" lines); serve's "dlq: serving http://ADDR/"
// line once it listens. Errors, warnings, IDs not found and dead
// letters not replayed (refused by -max-replays or by the broker) go to
// stderr.
//
// Exit status:
//
//	0    done (for replay: every selected claim replayed, or skipped as
//	     delivered or as replayed already in this run)
//	1    a named ID is not in claim.dead (show, replay, purge -yes); or a
//	     replay was refused, by -max-replays or by the broker (nack or
//	     return), and that dead letter stays in claim.dead
//	2    usage error, or purge without -yes; or an EAI_AMQP_URL that
//	     cannot be used (unparsable, port out of range); or serve on an
//	     address other than loopback without EAIMQ_DLQ_TOKEN
//	69   the broker cannot be reached
//	74   the store cannot be opened or read (replay and purge; any command
//	     when a lookup fails)
//	75   replay: no confirm in time; the dead letters of that batch stay
//	77   the broker refused the user or password
//	78   claim.dead or eai.claim does not exist: run topology first; or
//	     the vhost does not exist, or a TLS setting is wrong; or serve
//	     cannot listen on -addr
//	130  interrupted; every dead letter not yet acted on stays in claim.dead
package main
