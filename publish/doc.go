// Publish sends claim JSON files to RabbitMQ and reports each one sent only
// when the broker has confirmed it and routed it to a queue.
//
// It is the drop-in for the lab's publish.py: `publish claim.json` publishes
// the file's bytes, unchanged, to exchange eai.claim with routing key claim,
// persistent (delivery_mode 2), message_id = the JSON's guid, content_type
// application/json, with publisher confirms and the mandatory flag.
//
// Usage:
//
//	publish [flags] FILE...
//	publish -h | -version
//
// FILE "-" reads one claim from standard input. Many files are published in
// one connection with pipelined confirms (up to -window outstanding), not one
// round trip each.
//
// # What is checked
//
// Every file is read and checked before anything is published. A claim must
// be one well-formed JSON object of at most -max-bytes whose top-level
// "guid" member can serve as message_id and as the Idempotency-Key header
// the consumer sends to the partner:
//
//   - the member name is exactly "guid" (not "GUID"), and it appears once;
//   - its value is a string, taken byte-exact: its JSON escapes are decoded
//     exactly and nothing is normalised. Invalid UTF-8 and a lone surrogate
//     escape (\ud800) are refused: a decoder that turned them into U+FFFD
//     would give two claims one message_id, and the consumer would drop
//     the second as a duplicate;
//   - 1 to 255 bytes (message_id is an AMQP shortstr);
//   - no control character (C0 including TAB, DEL, C1 U+0080–U+009F) and
//     no white space at either end: none of these travels unchanged in an
//     HTTP header.
//
// Anything else in the claim is the partner's to judge (an empty docs list
// is its 422 to give). If any file fails, nothing is published (exit 65,
// or 66 when a file cannot be opened) unless -keep-going asks to send the
// valid ones.
//
// -max-bytes is 16 MiB by default: RabbitMQ 4.x's default largest message
// (max_message_size), so that a claim publish passes is one every broker
// version takes by default. RabbitMQ 3.x takes up to 128 MiB, which
// -max-bytes 134217728 allows; a 4.x broker takes that much only when its
// rabbitmq.conf raises max_message_size. A claim above the broker's
// max_message_size is refused by the broker, which closes the channel
// (406): publish counts that claim as nacked with the reason, those
// published after it on the channel as unconfirmed, and exits 65 with
// what to do. topology -check reports the broker's max_message_size.
//
// The check keeps each file's name, size, guid and checksum, not the
// batch's bytes: past the first 8 MiB of claims, each file is read again
// when its turn to be sent comes, so memory stays at a few claims however
// many files there are. A file that changed in between (its size or
// CRC-32C differs, or it is gone) is not sent and is reported ("changed").
// What cannot be read twice (standard input, a pipe such as <(...), a FIFO,
// a device) is read once and kept.
//
// A claim counts as sent only when the broker acked it and did not return it.
// The broker acks an unroutable mandatory message after returning it
// (basic.return, then basic.ack), so a return is a failure even though an
// ack follows.
//
// # Signals
//
// SIGINT or SIGTERM stops publish within a second, wherever it is: reading
// (even a FIFO without a writer, a terminal, or /dev/zero), connecting, or
// publishing. Nothing more is published after the signal, and no message is
// ever cut in half; the confirms of what was already published are awaited
// for a moment so that their outcome is known. Exit 130 means no outcome is
// in doubt (nothing was published, or what was published was confirmed and
// the summary says which); exit 75 means some claims were published and not
// confirmed.
//
// Flags:
//
//	-window n       confirms outstanding at once, 1 to 10000 (default 256)
//	-timeout d      longest wait for a confirm and for the connection,
//	                100ms to 1h (default 10s); it bounds every wait on
//	                the broker: the dial of each address, the channel's
//	                opening, each confirm, and a write the broker has
//	                stopped reading (an alarm, a stalled node)
//	-max-bytes n    largest claim file accepted, 1 to 134217728 (RabbitMQ
//	                3.x's default largest message of 128 MiB); default
//	                16777216, RabbitMQ 4.x's default largest message
//	-keep-going     publish the valid files even if some are invalid
//	-progress mode  auto, always or never (default auto); see Output
//	-json           print the summary as one JSON object (see Output)
//	-h, -help       print the usage and the flags on stdout and exit 0
//	                (-h full: this whole manual)
//	-version        print the version (module, VCS revision, Go) and exit 0
//
// A value outside its range is a usage error (exit 2). Flags may be
// written -flag or --flag; a mistake prints one line saying what is wrong
// (and for a mistyped flag, "did you mean -window?"), then "run 'publish
// -h' for the manual", exit 2.
//
// # Output
//
// Stdout gets one summary line, printed whenever the files were given
// (whatever the outcome, exit 0 or not; not after a usage error), always
// with the same fields in the same order:
//
//	publish: 3 sent, 0 returned, 0 nacked, 0 invalid, 0 changed, 0 unconfirmed, 0 not sent (78ms)
//
// Every file given is counted in exactly one of the seven; "not sent"
// counts valid claims never published (a refused batch, no connection, a
// signal). The time is the whole run's. Why something failed goes to
// stderr: one line per failed claim with its file name and reason, then
// one line saying what the exit status means, such as
//
//	publish: 1 of 2 file(s) are not valid claims: nothing published (-keep-going sends the valid ones)
//
// With -json the summary is one JSON object on one line instead, with the
// same fields, the time in seconds, and every claim not sent, in the order
// given ("guid" is "" when the file has none that can be used):
//
//	{"sent":1,"returned":0,"nacked":0,"invalid":1,"changed":0,
//	 "unconfirmed":0,"not_sent":0,"seconds":0.021,
//	 "failures":[{"file":"bad.json","guid":"","reason":"malformed JSON: ..."}]}
//
// Progress ("publish: 120/5000 confirmed") goes to stderr. With -progress
// auto it is shown only when stderr is a terminal and there is more than
// one claim, as one line rewritten in place (a carriage return, at most ten
// times a second); -progress always shows it even for one claim, and when
// stderr is not a terminal (a log file, a pipe) as plain lines instead, at
// most one a second, and the final count; -progress never shows none.
//
// Environment:
//
//	EAI_AMQP_URL  broker address (default amqp://guest:guest@127.0.0.1:5672/%2F;
//	              amqps:// speaks TLS; several addresses separated by commas,
//	              a cluster's nodes: the first that answers is used, and a
//	              claim is sent once the queue, quorum or classic, confirmed it)
//	TRACEPARENT   a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>) put on
//	              every message as the header traceparent; the consumer
//	              forwards it to the claim system (an invalid one: exit 2)
//
// Exit status (when several apply, the first in this list):
//
//	0    every claim was confirmed and routed (and -h, -version)
//	2    usage error (unknown flag, a value out of its range, no file,
//	     an unusable EAI_AMQP_URL)
//	69   the broker cannot be reached, took the connection but did not
//	     open a channel within -timeout, or the connection died mid-run
//	75   a confirm did not come in time, a write stalled past -timeout,
//	     or a signal came before the confirm:
//	     those claims may or may not be queued; publishing them again is
//	     safe, since the consumer deduplicates by message_id
//	130  interrupted by SIGINT or SIGTERM with no outcome in doubt:
//	     nothing published, or what was published was confirmed
//	77   the broker refused the user or password, or the user's access
//	     to the vhost
//	78   exchange eai.claim does not exist (run topology first), the vhost
//	     does not exist, or a TLS setting is wrong
//	4    the broker nacked a claim
//	3    a claim was returned as unroutable (no queue bound)
//	66   a file cannot be opened: it does not exist (a mistyped name?),
//	     is not readable, or is a directory
//	65   a file is not a valid claim (empty, not a JSON object, too
//	     large, no usable guid), or it changed between the check and its
//	     sending; or the broker refused a claim larger than its
//	     max_message_size (and closed the channel: the claims published
//	     after it are unconfirmed)
package main
