// Claimsys runs the stand-in for the partner's claim system, with the lab
// fixture's behaviour (python3 partner.py claim), for the demo and for
// people trying the consumer.
//
// Usage:
//
//	claimsys [-addr 127.0.0.1:9202] [-delay 0] [-force-status 0] [-flap]
//	         [-idempotency-draft]
//	claimsys -stats [-json] [-addr 127.0.0.1:9202]
//	claimsys -h | -version
//
// Flags:
//
//	-addr host:port   listen address (default 127.0.0.1:9202, the
//	                  fixture's port); the port is 0 to 65535, 0 picking a
//	                  free one (the address is printed on start)
//	-delay d          wait d before answering each claim: a Go duration,
//	                  0 to 10m (50ms, 1.5s); default 0
//	-force-status n   answer every claim with status n instead of the
//	                  fixture's rules: 0 (the rules, default) or a final
//	                  HTTP status, 200 to 599 (a 1xx is not an answer)
//	-flap             alternate 503 and 201 on every call, whatever the claim
//	-idempotency-draft
//	                  enforce the IETF Idempotency-Key draft
//	                  (draft-ietf-httpapi-idempotency-key-header), as a
//	                  partner that follows it would; see Idempotency-Key
//	-stats            do not serve: ask the claimsys running at -addr for
//	                  its counts and print one line per claim (guid, calls,
//	                  201s, last status), then the totals, for scripts and
//	                  people without curl and jq
//	-json             with -stats: print the body of GET /_stats as it
//	                  came (one JSON object, see below) instead; without
//	                  -stats it is a usage error
//	-h, -help         print the usage and the flags on stdout and exit 0
//	                  (-h full: this whole manual)
//	-version          print the version (module, VCS revision, Go) and
//	                  exit 0
//
// Flags may be written -flag or --flag; a mistake prints one line saying
// what is wrong (and for a mistyped flag, "did you mean -addr?"), then
// "run 'claimsys -h' for the manual", exit 2.
//
// Output: serving, one line on stdout once it listens, with the address
// (the port picked, for -addr host:0):
//
//	claimsys: listening on http://127.0.0.1:9202 (POST /v1/claims, ...)
//
// -stats prints, sorted by guid, "GUID CALLS ACCEPTED LAST_STATUS" (the
// calls for that guid, how many were answered 201, the status of the last
// answer), then one line of totals:
//
//	g-1 1 1 201
//	g-2 1 0 422
//	# total 2, max concurrency 1, idempotency-key repeats 0
//
// and, when the draft answered any call, a line of its counts:
//
//	# idempotency draft: 1 reused (422), 1 in progress (409), 2 replayed
//
// Endpoints:
//
//	POST /v1/claims  a claim JSON; the fixture's rules, in this order:
//	                   body not a JSON object            → 400
//	                   "docs" missing, null or []        → 422 documents missing
//	                   "claimId" starting with BUSY      → 503 busy, try later
//	                   anything else                     → 201 accepted
//	GET  /_stats     counts as JSON: "total", "by_guid" (calls per claim),
//	                 "by_claim_id", "by_status", "accepted_by_guid",
//	                 "last_status_by_guid", "max_concurrency",
//	                 "idempotency_key_repeats" (calls repeating an
//	                 Idempotency-Key already answered 201), "held",
//	                 "idempotency_draft" ({"reused_422","in_progress_409",
//	                 "replayed"}: the draft's answers, not in "total")
//	POST /_control   change the behaviour while running; every field is
//	                 optional, an unknown field or a value out of range is
//	                 400 and changes nothing:
//	                   "delay_ms": 50             delay per call, 0 to 600000
//	                   "force_status": 503        as -force-status; 0 undoes it
//	                   "flap": true               as -flap
//	                   "honour_idempotency_key": true
//	                                              answer a repeated key with 200
//	                                              instead of processing it again
//	                   "idempotency_draft": true  as -idempotency-draft; false
//	                                              undoes it
//	                   "hold_after": 25           after 25 calls in all were
//	                                              answered 201, hold every
//	                                              further call unanswered (-1:
//	                                              no gate)
//	                   "release": true            answer the held calls and
//	                                              open the gate
//	                   "reset": true              zero the counts, open the gate
//	GET  /healthz    200 {"status":"ok"} while it serves
//
// Idempotency-Key: with -idempotency-draft, each key is remembered with
// the SHA-256 of its first request's body, from the moment it arrives
// (before -delay and the gate):
//
//	a key never seen                 processed by the rules above
//	seen, another body               422, application/problem+json
//	                                 ("Idempotency-Key is already used")
//	seen, same body, not answered    409, application/problem+json ("A
//	                                 request is outstanding"): held at
//	                                 the gate or in its -delay
//	seen, same body, answered        the first answer's status again, not
//	                                 processed again (not in "total");
//	                                 a transient answer (5xx, 408, 429)
//	                                 is not kept: the retry is processed
//
// A request without the header is processed by the rules. "reset" forgets
// the keys.
//
// To get a 422, send a claim without documents:
//
//	curl -si -d '{"guid":"g-1","claimId":"C-1","docs":[]}' http://127.0.0.1:9202/v1/claims
//
// To get a 503, use a claimId starting with BUSY, or make every call one:
//
//	curl -si -d '{"guid":"g-2","claimId":"BUSY-1","docs":["r.pdf"]}' http://127.0.0.1:9202/v1/claims
//	curl -s -d '{"force_status":503}' http://127.0.0.1:9202/_control
//
// Exit status:
//
//	0   stopped by SIGINT or SIGTERM (held calls are released and answered
//	    first), -stats printed, or -h or -version
//	1   it cannot listen on -addr (in use, not this machine's address);
//	    -stats: what answers at -addr is not a claimsys (not 200 and JSON)
//	2   usage error: an unknown flag, a value out of range, an argument,
//	    -json without -stats
//	69  -stats: no claimsys answers at -addr
package main
