package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/audit"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/dlq"
	"eaimq/internal/dlqcli"
	"eaimq/internal/partner"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// dlqWithEnv runs dlq as w.dlq does, with more environment and a stdin.
func (w *world) dlqWithEnv(env map[string]string, stdin io.Reader, args ...string) (int, string, string) {
	w.t.Helper()
	var out, errb bytes.Buffer
	all := map[string]string{store.EnvPath: w.db}
	for k, v := range env {
		all[k] = v
	}
	getenv := w.vh.Getenv(all)
	c, err := parseConfig(args, getenv, &out, &errb)
	if err == nil {
		c.dlq.Hooks, c.dlq.Edit.Stdin = w.hooks, stdin
		err = execute(context.Background(), c, getenv, &out, &errb)
	}
	cli.Report(&errb, "dlq", err)
	return cli.Code(err), out.String(), errb.String()
}

// jsonKeys is the documented shape of a list -json row: every key, on
// every row.
var jsonKeys = []string{"attempts", "broker_count", "broker_reason", "claim_id", "crash_loop", "dead_lettered_at", "dead_reason",
	"deliveries", "edit", "excerpt", "from_queue", "message_id", "our_reason", "purged", "reason", "recorded", "replays", "state", "status"}

// TestListColumnsAndShape is issue 23's item 1: the table shows the
// partner's last status and (the message of) its answer, and the broker's
// reason in full without "x1"; -json has every field on every row, null
// where there is none (a dead letter with no record, no x-death, no
// claimId); -status none selects the claims that got no answer, and
// those of which nothing is on record.
func TestListColumnsAndShape(t *testing.T) {
	w := mixedRun(t)
	// A claim the partner never answered: the consumer cannot reach it.
	partner := w.url
	w.url = "http://127.0.0.1:1"
	w.vh.PublishClaims(t, brokertest.Claim("noanswer-0", "C-NA", "r.pdf"))
	w.consume("3")
	w.url = partner
	w.deadLetter(amqp.Publishing{MessageId: "bare-0", Body: []byte(`not json`), DeliveryMode: 2})
	if n := w.vh.Depth(t, topo.DeadQueue); n != 6 {
		t.Fatalf("setup: claim.dead holds %d, want 6", n)
	}
	code, out, errs := w.dlq("list")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errs)
	}
	lines := strings.Split(out, "\n")
	head := strings.Fields(lines[0])
	if want := "MESSAGE_ID CLAIM_ID DEAD-LETTERED (UTC) FROM BROKER CALLS STATUS ANSWER REASON"; strings.Join(head, " ") != want {
		t.Errorf("heading %q, want %q", lines[0], want)
	}
	row := func(id string) []string {
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == id {
				return f
			}
		}
		t.Fatalf("no row for %s:\n%s", id, out)
		return nil
	}
	// message_id claimId date time FROM BROKER CALLS STATUS ANSWER... REASON...
	if f := row("nodocs-0"); f[4] != topo.Queue || f[5] != "rejected" || f[6] != "1" || f[7] != "422" ||
		!strings.HasPrefix(strings.Join(f[8:], " "), "documents missing rejected: rejected by the claim system") {
		t.Errorf("nodocs-0: %q", f)
	}
	if f := row("busy-0"); f[5] != "rejected" || f[6] != "2" || f[7] != "503" || !strings.Contains(strings.Join(f, " "), "failed-twice:") {
		t.Errorf("busy-0: %q", f)
	}
	if f := row("noanswer-0"); f[6] != "2" || f[7] != "-" || !strings.Contains(strings.Join(f, " "), "connection refused") {
		t.Errorf("noanswer-0: %q", f)
	}
	// Without a date the DEAD-LETTERED column is one "-".
	if f := row("bare-0"); strings.Join(f[1:8], " ") != "- - - - - - -" || strings.Join(f[8:], " ") != "unknown (no record in the store)" {
		t.Errorf("bare-0: %q", f)
	}
	if strings.Contains(out, " x1 ") {
		t.Errorf("the table still says x1:\n%s", out)
	}

	code, out, _ = w.dlq("-json", "list")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !slices.Equal(keys, jsonKeys) {
			t.Errorf("keys %v, want %v", keys, jsonKeys)
		}
		if m["message_id"] == "bare-0" {
			for _, k := range []string{"claim_id", "dead_lettered_at", "from_queue", "broker_reason", "broker_count", "status", "attempts", "state", "excerpt", "edit"} {
				if m[k] != nil {
					t.Errorf("bare-0 %s = %v, want null", k, m[k])
				}
			}
		}
		if m["message_id"] == "nodocs-0" && (m["status"] != 422.0 || m["broker_count"] != 1.0 || m["attempts"] != 1.0) {
			t.Errorf("nodocs-0: %v", m)
		}
	}

	code, out, errs = w.dlq("-json", "-status", "none", "list")
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r dlqcli.Row
		json.Unmarshal([]byte(line), &r)
		ids = append(ids, r.MessageID)
	}
	sort.Strings(ids)
	if code != 0 || !slices.Equal(ids, []string{"bare-0", "noanswer-0"}) {
		t.Errorf("-status none: %d %v %s", code, ids, errs)
	}
	if code, out, _ := w.dlq("-json", "-status", "503", "list"); code != 0 || strings.Count(out, "\n") != 2 {
		t.Errorf("-status 503: %d\n%s", code, out)
	}
	if code, _, errs := w.dlq("-no-store", "-status", "none", "list"); code != cli.ExitUsage {
		t.Errorf("-no-store -status none: %d %s", code, errs)
	}
}

// TestLookupByClaimID is item 3: show, replay and purge take a claimId
// that is one dead letter's; one that is several's lists them, exit 1, and
// nothing is done with them.
func TestLookupByClaimID(t *testing.T) {
	w := mixedRun(t)
	// Two dead letters of one claimId: a claim published twice under two guids.
	w.deadLetter(amqp.Publishing{MessageId: "twin-a", Body: brokertest.Claim("twin-a", "C-TWIN"), DeliveryMode: 2},
		amqp.Publishing{MessageId: "twin-b", Body: brokertest.Claim("twin-b", "C-TWIN"), DeliveryMode: 2})
	if code, out, errs := w.dlq("show", "C-N0"); code != 0 || !strings.Contains(out, "message_id:    nodocs-0") {
		t.Errorf("show C-N0: %d\n%s%s", code, out, errs)
	}
	for _, args := range [][]string{{"show", "C-TWIN"}, {"replay", "C-TWIN"}, {"-yes", "purge", "C-TWIN"}, {"edit", "-body", "/dev/null", "C-TWIN"}} {
		code, out, errs := w.dlq(args...)
		if code != cli.ExitFailure || !brokertest.ContainsAll(errs, `"C-TWIN" is the claimId of 2 dead letters`, "twin-a", "twin-b") || acted(out) {
			t.Errorf("%q: %d\n%s%s", args, code, out, errs)
		}
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 6 {
		t.Fatalf("claim.dead holds %d after the ambiguous IDs, want 6", n)
	}
	ok := 201
	w.partner.Set(claimsys.Control{ForceStatus: &ok})
	if code, out, errs := w.dlq("replay", "BUSY-1"); code != 0 || !strings.Contains(out, "replayed busy-1") {
		t.Errorf("replay BUSY-1: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := w.dlq("-yes", "purge", "C-N1", "twin-a"); code != 0 || !brokertest.ContainsAll(out, "archived nodocs-1", "archived twin-a", "purged 2") {
		t.Errorf("purge C-N1 twin-a: %d\n%s%s", code, out, errs)
	}
	if d := w.vh.Drain(t, topo.Queue); len(d) != 1 || d[0].MessageId != "busy-1" {
		t.Errorf("claim.in after the replay: %d messages", len(d))
	}
	// An ID that is a message_id wins over another's claimId.
	w.deadLetter(amqp.Publishing{MessageId: "odd", Body: brokertest.Claim("odd", "busy-0"), DeliveryMode: 2})
	if code, out, _ := w.dlq("show", "busy-0"); code != 0 || !strings.Contains(out, "message_id:    busy-0") {
		t.Errorf("show busy-0:\n%s", out)
	}
}

// TestHintsLeadToPurge is item 4: a replay skipped because the claim is
// delivered says to purge the stale copy, and names the command; it does
// not point at -force.
func TestHintsLeadToPurge(t *testing.T) {
	w := mixedRun(t)
	w.deadLetter(amqp.Publishing{MessageId: "good-1", Body: brokertest.Claim("good-1", "C-1", "r.pdf"), DeliveryMode: 2})
	code, out, errs := w.dlq("replay", "good-1")
	if code != 0 || !strings.Contains(out, "skipped good-1: the store records it as delivered, so this dead copy is stale; purge it with: dlq -yes purge good-1") ||
		strings.Contains(out+errs, "-force") {
		t.Errorf("replay of a delivered claim: %d\n%s%s", code, out, errs)
	}
	w.deadLetter(amqp.Publishing{MessageId: "again", Body: brokertest.Claim("again", "C-again", "r.pdf"), DeliveryMode: 2,
		Headers: amqp.Table{"x-eaimq-replays": int64(5)}})
	if code, _, errs := w.dlq("replay", "again"); code != cli.ExitFailure || !strings.Contains(errs, "Fix the claim (dlq edit again)") {
		t.Errorf("over -max-replays: %d %s", code, errs)
	}
}

// TestEditBody is item 2 with -body: the edit is checked as the page's
// (the guid stays), replayed with the x-eaimq-edited record and its new
// Idempotency-Key (message_id + "+edit." + 16 hex digits of the body's
// sha256), which show prints; the dead copy is gone only once the copy is
// in claim.in; the partner then takes the fix.
func TestEditBody(t *testing.T) {
	w := mixedRun(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.json", `{"guid":"other","claimId":"C-N0","docs":["r.pdf"]}`)
	if code, out, errs := w.dlq("edit", "-body", bad, "nodocs-0"); code != cli.ExitDataErr || !strings.Contains(errs, `must stay "nodocs-0"`) || acted(out) {
		t.Errorf("edit changing the guid: %d\n%s%s", code, out, errs)
	}
	// A -body file that is not there is a mistyped name: 66 (EX_NOINPUT),
	// not 65, and the file is named.
	missing := filepath.Join(dir, "mistyped.json")
	if code, out, errs := w.dlq("edit", "-body", missing, "nodocs-0"); code != cli.ExitNoInput || !strings.Contains(errs, missing) || acted(out) {
		t.Errorf("edit -body of a missing file: %d, want %d\n%s%s", code, cli.ExitNoInput, out, errs)
	}
	fixed := `{"guid":"nodocs-0","claimId":"C-N0","docs":["report.pdf"],"amount":1200}`
	good := write("good.json", fixed)
	key := partner.EditKey("nodocs-0", []byte(fixed))
	if !strings.HasPrefix(key, "nodocs-0+edit.") || len(key) != len("nodocs-0+edit.")+16 {
		t.Fatalf("key %q", key)
	}
	// By claimId, as a person reads it off the partner's answer.
	code, out, errs := w.dlq("edit", "C-N0", "-body", good)
	if code != 0 || !brokertest.ContainsAll(out, "replayed nodocs-0", "Idempotency-Key "+key) {
		t.Fatalf("edit: %d\n%s%s", code, out, errs)
	}
	d := w.vh.Drain(t, topo.Queue)
	if len(d) != 1 || string(d[0].Body) != fixed || d[0].MessageId != "nodocs-0" {
		t.Fatalf("claim.in after the edit: %d messages", len(d))
	}
	e, _ := d[0].Headers["x-eaimq-edited"].(amqp.Table)
	if e["idempotency_key"] != key || e["by"] != audit.OSUser() || e["via"] != "dlq edit" || e["previous_sha256"] == "" {
		t.Errorf("x-eaimq-edited: %v", e)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 3 {
		t.Errorf("claim.dead holds %d, want 3", n)
	}
	// The edited copy, dead-lettered again, shows its edit and key.
	w.deadLetter(amqp.Publishing{MessageId: d[0].MessageId, Body: d[0].Body, Headers: d[0].Headers, DeliveryMode: 2})
	code, out, _ = w.dlq("show", "nodocs-0")
	if code != 0 || !brokertest.ContainsAll(out, "edited:", "via dlq edit", "idempotency:   "+key) {
		t.Errorf("show of the edited copy:\n%s", out)
	}
	code, out, _ = w.dlq("-json", "show", "nodocs-0")
	var s struct {
		Edit *dlq.Edited `json:"edit"`
	}
	if json.Unmarshal([]byte(out), &s); code != 0 || s.Edit == nil || s.Edit.IdempotencyKey != key {
		t.Errorf("-json show: %s", out)
	}
	// From stdin, and an unchanged body changes nothing.
	body, _ := os.ReadFile(good)
	if code, out, errs := w.dlqWithEnv(nil, bytes.NewReader(body), "edit", "-body", "-", "nodocs-0"); code != 0 || acted(out) || !strings.Contains(errs, "no change") {
		t.Errorf("edit with the same body: %d\n%s%s", code, out, errs)
	}
}

// TestEditEditor is item 2 with $EDITOR: the editor gets the body
// formatted in a 0600 file; what it saves is checked and replayed; an
// editor that saves nothing new replays nothing; an edit that breaks the
// claim is refused and kept for the person to fix.
func TestEditEditor(t *testing.T) {
	w := mixedRun(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "fix.sh")
	// The editor: checks the file's mode, adds a document.
	os.WriteFile(script, []byte("#!/bin/sh\n[ \"$(stat -c %a \"$1\")\" = 600 ] || exit 3\n"+
		"sed -i 's/\"docs\": \\[\\]/\"docs\": [\"fixed.pdf\"]/' \"$1\"\n"), 0o700)
	env := map[string]string{"EDITOR": script, "TMPDIR": dir}
	code, out, errs := w.dlqWithEnv(env, nil, "edit", "nodocs-1")
	if code != 0 || !strings.Contains(out, "replayed nodocs-1") {
		t.Fatalf("edit with %s: %d\n%s%s", script, code, out, errs)
	}
	w.consume("2")
	if n := w.partner.Stats().Accepted["nodocs-1"]; n != 1 {
		t.Errorf("the edited nodocs-1 accepted %d times, want 1", n)
	}
	if code, out, errs := w.dlqWithEnv(map[string]string{"VISUAL": "true", "EDITOR": script, "TMPDIR": dir}, nil, "edit", "nodocs-0"); code != 0 || acted(out) || !strings.Contains(errs, "no change") {
		t.Errorf("an editor that changes nothing: %d\n%s%s", code, out, errs)
	}
	breaker := filepath.Join(dir, "break.sh")
	os.WriteFile(breaker, []byte("#!/bin/sh\necho '{\"guid\": \"nodocs-0\",' > \"$1\"\n"), 0o700)
	// TMPDIR: the broken edit is kept for its author, and must not be
	// left in the machine's /tmp by every run.
	code, out, errs = w.dlqWithEnv(map[string]string{"EDITOR": breaker, "TMPDIR": dir}, nil, "edit", "nodocs-0")
	if code != cli.ExitDataErr || acted(out) || !strings.Contains(errs, "the edit is kept in "+dir) {
		t.Errorf("an edit that breaks the claim: %d\n%s%s", code, out, errs)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 3 {
		t.Errorf("claim.dead holds %d, want 3 (nodocs-0 and the two BUSY)", n)
	}
}

// TestAuditTrail is item 5 on the command line: replay, edit and purge
// each append one line to the file beside the store, 0600, naming who,
// what and which ids; history prints them, all or one claim's; an action
// whose entry cannot be written is not done.
func TestAuditTrail(t *testing.T) {
	w := mixedRun(t)
	ok := 201
	w.partner.Set(claimsys.Control{ForceStatus: &ok})
	if code, _, errs := w.dlq("replay", "busy-0", "nope"); code != cli.ExitFailure {
		t.Fatalf("replay: %d %s", code, errs)
	}
	body := filepath.Join(t.TempDir(), "b.json")
	os.WriteFile(body, []byte(`{"guid":"nodocs-0","claimId":"C-N0","docs":["r.pdf"]}`), 0o600)
	if code, _, errs := w.dlq("edit", "-body", body, "nodocs-0"); code != 0 {
		t.Fatalf("edit: %d %s", code, errs)
	}
	if code, _, errs := w.dlq("-yes", "purge", "-reason", "rejected"); code != 0 {
		t.Fatalf("purge: %d %s", code, errs)
	}
	if code, _, errs := w.dlq("purge", "busy-1"); code != cli.ExitUsage { // a dry run: no entry
		t.Fatalf("purge without -yes: %d %s", code, errs)
	}
	path := audit.FilePath(w.db)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", path, st, err)
	}
	raw, _ := os.ReadFile(path)
	var es []audit.Entry
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e audit.Entry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	want := []struct {
		action, via, result string
		ids                 []string
	}{
		{"replay", "dlq replay", audit.Partial, []string{"busy-0"}},
		{"edit", "dlq edit", audit.Done, []string{"nodocs-0"}},
		{"purge", "dlq purge", audit.Done, []string{"nodocs-1"}},
	}
	if len(es) != len(want) {
		t.Fatalf("%d entries, want %d:\n%s", len(es), len(want), raw)
	}
	for i, x := range want {
		e := es[i]
		if e.Action != x.action || e.Via != x.via || e.Result != x.result || !slices.Equal(e.IDs, x.ids) || e.Who != audit.OSUser() ||
			time.Since(e.At) > time.Minute {
			t.Errorf("entry %d: %+v, want %+v", i, e, x)
		}
	}
	if nd := es[0].NotDone; len(nd) != 1 || nd[0].ID != "nope" || es[0].Target != "busy-0 nope" {
		t.Errorf("replay entry: %+v", es[0])
	}
	if e := es[1].Edit; e == nil || e.IdempotencyKey != partner.EditKey("nodocs-0", []byte(`{"guid":"nodocs-0","claimId":"C-N0","docs":["r.pdf"]}`)) {
		t.Errorf("edit entry: %+v", es[1].Edit)
	}
	code, out, _ := w.dlq("history", "nodocs-0")
	if code != 0 || !brokertest.ContainsAll(out, "edit    done", "by "+audit.OSUser()+" (dlq edit)", "edited and replayed (1): nodocs-0", "Idempotency-Key nodocs-0+edit.") ||
		strings.Contains(out, "purge") {
		t.Errorf("history nodocs-0:\n%s", out)
	}
	if code, out, _ := w.dlq("-json", "history"); code != 0 || strings.Count(out, "\n") != 3 {
		t.Errorf("-json history:\n%s", out)
	}
	if code, _, errs := w.dlq("history", "never-there"); code != cli.ExitFailure || !strings.Contains(errs, "no entry for") {
		t.Errorf("history of an unknown id: %d %s", code, errs)
	}
	// A trail that cannot be written: nothing is done.
	os.Remove(path)
	os.Mkdir(path, 0o700)
	if code, out, errs := w.dlq("-yes", "purge", "busy-1"); code != cli.ExitIOErr || acted(out) || !strings.Contains(errs, "audit trail") {
		t.Errorf("purge with an unwritable trail: %d\n%s%s", code, out, errs)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 1 {
		t.Errorf("claim.dead holds %d, want busy-1 alone", n)
	}
}

// TestCrashLoopShownAndReplayed is item 1's (and issue 21 item 3's) crash
// loop: a quorum claim.in dead-letters a claim delivered past its delivery
// limit without an ack or a reject (here: a consumer that dies with it
// each time, its channel closed). list shows it as delivery_limit and a
// crash loop, not as the partner's rejection; -reason crash-loop selects
// it; replay puts it back, and the consumer delivers it.
func TestCrashLoopShownAndReplayed(t *testing.T) {
	vh := brokertest.New(t)
	conn := vh.Dial(t)
	if err := topo.DeclareFor(conn, topo.Quorum); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	vh.Policy(t, "crash-limit", topo.Queue, `{"delivery-limit":1}`)
	p := claimsys.New()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	w := &world{t: t, vh: vh, partner: p, url: srv.URL, db: filepath.Join(t.TempDir(), "processed.db")}
	w.vh.PublishClaims(t, brokertest.Claim("loop-0", "C-LOOP", "r.pdf"))
	w.consume("1") // creates the store; the claim is delivered, so publish another
	w.vh.PublishClaims(t, brokertest.Claim("loop-1", "C-LOOP1", "r.pdf"))
	c := w.vh.Dial(t)
	defer c.Close()
	for i := 0; i < 10 && w.vh.Depth(t, topo.DeadQueue) == 0; i++ {
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := ch.Get(topo.Queue, false); err != nil || (!ok && i == 0) {
			t.Fatalf("get %d: %v %v", i, ok, err)
		}
		ch.Close() // the consumer died with it
		time.Sleep(50 * time.Millisecond)
	}
	brokertest.Eventually(t, 10*time.Second, "the broker dead-letters loop-1", func() bool { return w.vh.Depth(t, topo.DeadQueue) == 1 })

	code, out, errs := w.dlq("list")
	if code != 0 || !brokertest.ContainsAll(out, "delivery_limit", "crash-loop: delivered until claim.in's delivery limit without an outcome (not the partner's answer)") ||
		strings.Contains(out, "rejected") {
		t.Errorf("list: %d\n%s%s", code, out, errs)
	}
	if code, out, _ := w.dlq("show", "loop-1"); code != 0 || !strings.Contains(out, "a consumer died or lost its connection with it each time; 0 partner call(s) on record") {
		t.Errorf("show:\n%s", out)
	}
	rows := w.rows()
	if r := rows["loop-1"]; !r.CrashLoop || r.Broker != "delivery_limit" || r.Status != 0 {
		t.Errorf("-json: %+v", r)
	}
	if code, out, _ := w.dlq("-json", "-reason", "crash-loop", "list"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("-reason crash-loop: %d\n%s", code, out)
	}
	if code, out, _ := w.dlq("-json", "-reason", "rejected", "list"); code != 0 || out != "" {
		t.Errorf("-reason rejected: %d\n%s", code, out)
	}
	if code, out, errs := w.dlq("replay", "-reason", "crash-loop"); code != 0 || !strings.Contains(out, "replayed loop-1") {
		t.Fatalf("replay: %d\n%s%s", code, out, errs)
	}
	w.consume("2")
	if n := w.partner.Stats().Accepted["loop-1"]; n != 1 || w.vh.Depth(t, topo.DeadQueue) != 0 {
		t.Errorf("after the replay: accepted %d times, claim.dead %d; want 1 and 0", n, w.vh.Depth(t, topo.DeadQueue))
	}
}
