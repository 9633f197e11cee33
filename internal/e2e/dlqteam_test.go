package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"eaimq/internal/audit"
	"eaimq/internal/brokertest"
	"eaimq/internal/dlqweb"
	"eaimq/internal/partner"
	"eaimq/internal/pgtest"
	"eaimq/internal/topo"
)

// issue 23: the dead-letter tools for a team, through the installed
// binaries, as an operator runs them.

// TestDLQTeamCommandLine: after a consumer run, dlq list shows the
// partner's status and answer; a claimId names its dead letter; dlq edit
// fixes a 422 from the command line with $EDITOR (the consumer then
// delivers it, and its copy carried the new Idempotency-Key); a replay of
// a delivered claim points at purge; every action is in dlq history, by
// the OS user.
func TestDLQTeamCommandLine(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.publishFiles(brokertest.Claim("team-0", "C-TEAM-0"), brokertest.Claim("team-1", "C-TEAM-1"), brokertest.Claim("team-2", "C-TEAM-2", "r.pdf"))
	w.drainWith()
	if d := w.vh.Depth(t, topo.DeadQueue); d != 2 {
		t.Fatalf("setup: claim.dead holds %d, want the two 422s", d)
	}
	r := w.run("dlq", "list")
	if r.code != 0 || !brokertest.ContainsAll(r.stdout, "STATUS ANSWER", "422    documents missing", "rejected: rejected by the claim system") {
		t.Errorf("dlq list: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The editor a person would use, as a script: it adds a document.
	dir := t.TempDir()
	editor := filepath.Join(dir, "editor.sh")
	os.WriteFile(editor, []byte("#!/bin/sh\nsed -i 's/\"docs\": \\[\\]/\"docs\": [\"scan.pdf\"]/' \"$1\"\n"), 0o700)
	r = w.runEnv([]string{"EDITOR=" + editor}, "dlq", "edit", "C-TEAM-0")
	if r.code != 0 || !strings.Contains(r.stdout, "replayed team-0") {
		t.Fatalf("dlq edit C-TEAM-0: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	key := regexp.MustCompile(`Idempotency-Key (team-0\+edit\.[0-9a-f]{16})`).FindStringSubmatch(r.stdout)
	if key == nil {
		t.Fatalf("no Idempotency-Key in:\n%s", r.stdout)
	}
	w.drainWith()
	if n := w.partner.Stats().Accepted["team-0"]; n != 1 {
		t.Errorf("the edited team-0 accepted %d times, want 1", n)
	}
	// A delivered claim dead-lettered by hand: the hint is purge.
	w.deadLetter("team-2")
	r = w.run("dlq", "replay", "team-2")
	if r.code != 0 || !strings.Contains(r.stdout, "purge it with: dlq -yes purge team-2") {
		t.Errorf("replay of a delivered claim: %d\n%s", r.code, r.stdout)
	}
	if r := w.run("dlq", "-yes", "purge", "team-2"); r.code != 0 {
		t.Fatalf("purge: %d %s", r.code, r.stderr)
	}
	r = w.run("dlq", "history")
	if r.code != 0 || !brokertest.ContainsAll(r.stdout, "edit    done", "by "+audit.OSUser()+" (dlq edit): C-TEAM-0", "Idempotency-Key "+key[1],
		"replay  partial", "purge   done", "archived in claim.dead.archive (1): team-2") {
		t.Errorf("dlq history:\n%s%s", r.stdout, r.stderr)
	}
	if st, err := os.Stat(audit.FilePath(w.db)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the audit trail: %v %v", st, err)
	}
}

// TestDLQTeamPostgresTrail: with a PostgreSQL store the trail is the table
// eaimq_audit in its database; dlq history reads it back.
func TestDLQTeamPostgresTrail(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.db = pgtest.New(t)
	w.publishFiles(brokertest.Claim("pg-0", "C-PG-0"))
	w.drainWith()
	if r := w.run("dlq", "-yes", "purge", "C-PG-0"); r.code != 0 || !strings.Contains(r.stdout, "archived pg-0") {
		t.Fatalf("purge: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := w.run("dlq", "-json", "history", "pg-0")
	var e audit.Entry
	if err := json.Unmarshal([]byte(r.stdout), &e); r.code != 0 || err != nil || e.Action != "purge" || e.IDs[0] != "pg-0" || e.Who != audit.OSUser() ||
		e.Archive != topo.ArchiveQueue {
		t.Errorf("history from PostgreSQL: %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	tr, err := audit.Open(context.Background(), w.db)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	n := 0
	tr.Entries(context.Background(), "", func(audit.Entry) error { n++; return nil })
	if n != 1 || !strings.HasPrefix(tr.Where(), audit.Table+" in ") {
		t.Errorf("%d entries in %s, want 1", n, tr.Where())
	}
}

// TestDLQServeTeam: dlq serve with named tokens (EAIMQ_DLQ_TOKENS): each
// person's actions are in the trail under their name; a wrong token is
// refused and logged without its value; /healthz answers without one; the
// banner names the vhost and the broker, never the password; search finds
// a claim by its claimId.
func TestDLQServeTeam(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.publishFiles(brokertest.Claim("serve-0", "C-SERVE-0"), brokertest.Claim("serve-1", "C-SERVE-1"))
	w.drainWith()
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("# who may act\nalice alice-token-0123456789\nbob   bob-token-0123456789\n"), 0o600)
	srv := w.startServe([]string{dlqweb.EnvTokens + "=" + tokens}, "-addr", "0.0.0.0:0")
	alice := map[string]string{"Authorization": "Bearer alice-token-0123456789"}
	bob := map[string]string{"Authorization": "Bearer bob-token-0123456789"}

	code, page := call(t, "GET", srv.base+"/search?q=c-serve-1", nil, alice)
	if code != 200 || !strings.Contains(page, `href="/claim?id=serve-1"`) || strings.Contains(page, `href="/claim?id=serve-0"`) ||
		!strings.Contains(page, "signed in as alice") || !strings.Contains(page, "vhost "+w.vh.Name) {
		t.Fatalf("search: %d\n%s", code, page)
	}
	if strings.Contains(page, "guest") {
		t.Errorf("the page shows the broker's user or password:\n%s", page)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
	_, confirm := call(t, "GET", srv.base+"/confirm?action=purge&id=serve-0", nil, alice)
	m := csrf.FindStringSubmatch(confirm)
	if m == nil {
		t.Fatalf("no CSRF token:\n%s", confirm)
	}
	if code, body := call(t, "POST", srv.base+"/action", url.Values{"action": {"purge"}, "id": {"serve-0"}, "csrf": {m[1]}}, alice); code != 200 || !strings.Contains(body, "1 purged") {
		t.Fatalf("alice's purge: %d\n%s", code, body)
	}
	if code, body := call(t, "POST", srv.base+"/action", url.Values{"action": {"retry"}, "id": {"serve-1"}, "csrf": {m[1]}}, bob); code != 200 || !strings.Contains(body, "1 replayed") {
		t.Fatalf("bob's retry: %d\n%s", code, body)
	}
	const wrong = "wrong-token-not-anyones-42"
	if code, _ := call(t, "GET", srv.base+"/", nil, map[string]string{"Authorization": "Bearer " + wrong}); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", code)
	}
	if code, body := call(t, "GET", srv.base+"/healthz", nil, nil); code != 200 || !strings.Contains(body, `"ok":true`) || !strings.Contains(body, `"claim_dead":0`) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	brokertest.Eventually(t, 10*time.Second, "the refusal logged", func() bool { return strings.Contains(srv.errb.String(), "a wrong token") })
	if strings.Contains(srv.errb.String(), wrong) {
		t.Errorf("dlq serve logged the wrong token itself:\n%s", srv.errb.String())
	}
	r := w.run("dlq", "-json", "history")
	var who []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e audit.Entry
		json.Unmarshal([]byte(line), &e)
		who = append(who, e.Who+" "+e.Action+" "+strings.Join(e.IDs, ","))
	}
	if r.code != 0 || strings.Join(who, "; ") != "alice purge serve-0; bob replay serve-1" {
		t.Errorf("the trail: %q\n%s", who, r.stderr)
	}
}

// TestDLQServeBrowserTeam is items 5-7 in a real Chromium: signed in with
// a named token through the login form, a person searches a claimId,
// opens the claim, edits it (the fix does not do, the partner answers 422
// again); the claim, back in claim.dead, shows its history with who did
// it and the Idempotency-Key the edit got; the groups page has the banner
// and the kept groups' "Count again now".
func TestDLQServeBrowserTeam(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.publishFiles(brokertest.Claim("web-0", "C-WEB-0"), brokertest.Claim("web-1", "C-WEB-1"))
	c := w.start("consumer", "--claim", w.url, "--max-seconds", "600")
	brokertest.Eventually(t, 60*time.Second, "two 422s in claim.dead", func() bool { return w.vh.Depth(t, topo.DeadQueue) == 2 })
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("carol carol-token-0123456789\n"), 0o600)
	srv := w.startServe([]string{dlqweb.EnvTokens + "=" + tokens}, "-addr", "0.0.0.0:0", "-refresh", "0")
	ctx := browser(t)
	must(t, ctx, "sign in", chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SetValue(chromedp.CSS(`input[name=token]`), "carol-token-0123456789"), chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		chromedp.WaitVisible(chromedp.CSS(`section.group`)))
	if b := text(t, ctx, "#banner"); !strings.Contains(b, "queue claim.dead") || !strings.Contains(b, w.vh.Name) {
		t.Errorf("banner %q", b)
	}
	if s := text(t, ctx, "#summary"); !strings.Contains(s, "2 dead letter(s)") {
		t.Errorf("summary %q", s)
	}
	must(t, ctx, "count again", chromedp.Click(chromedp.CSS(`#refresh`)), chromedp.WaitVisible(chromedp.CSS(`section.group`)))
	must(t, ctx, "search", chromedp.Click(chromedp.CSS(`#search-link`)), chromedp.WaitVisible(chromedp.CSS(`form.search input`)),
		chromedp.SetValue(chromedp.CSS(`form.search input`), "C-WEB-1"), chromedp.Click(chromedp.CSS(`#search`)),
		chromedp.WaitVisible(chromedp.CSS(`#refs`)))
	if n := eval[int](t, ctx, `document.querySelectorAll('#refs a').length`); n != 1 {
		t.Fatalf("search C-WEB-1: %d results", n)
	}
	draft := `{"guid":"web-1","claimId":"C-WEB-1","docs":[],"amount":99}`
	must(t, ctx, "edit web-1", chromedp.Click(chromedp.CSS(`#refs a`)), chromedp.WaitVisible(chromedp.CSS(`#draft`)),
		chromedp.SetValue(chromedp.CSS(`#draft`), draft), chromedp.Click(chromedp.CSS(`#edit-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if res := text(t, ctx, "#result"); !strings.Contains(res, "1 replayed") {
		t.Fatalf("edit: %q", res)
	}
	brokertest.Eventually(t, 60*time.Second, "the edited web-1 rejected again", func() bool {
		return w.partner.Stats().ByGuid["web-1"] == 2 && w.vh.Depth(t, topo.DeadQueue) == 2
	})
	must(t, ctx, "open web-1", chromedp.Navigate(srv.base+"/claim?id=web-1"), chromedp.WaitVisible(chromedp.CSS(`#events`)))
	events := text(t, ctx, "#events")
	key := partner.EditKey("web-1", []byte(draft))
	if !brokertest.ContainsAll(events, "carol", "dlq serve", "edit", "done", key) {
		t.Errorf("history on the claim page:\n%s", events)
	}
	c.stop(t)
}

// runEnv is run with more environment.
func (w *world) runEnv(env []string, name string, args ...string) result {
	w.t.Helper()
	cmd := exec.Command(filepath.Join(w.bin, name), args...)
	cmd.Env = append(w.env(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("run %s: %v", name, err)
	}
	return r
}
