package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/claimsys"
	"eaimq/internal/dlqweb"
	"eaimq/internal/pgtest"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write dlq/screenshots/*.png from the browser test")

// serveProc is a running dlq serve.
type serveProc struct {
	cmd  *exec.Cmd
	base string // http://127.0.0.1:port
	errb brokertest.Buffer
	done chan struct{}
}

// startServe starts the installed dlq serve with args and env (added to
// the world's) and waits for the address it printed.
func (w *world) startServe(env []string, args ...string) *serveProc {
	w.t.Helper()
	p := &serveProc{cmd: exec.Command(filepath.Join(w.bin, "dlq"), append([]string{"serve"}, args...)...), done: make(chan struct{})}
	p.cmd.Env = append(w.env(), env...)
	p.cmd.Stderr = &p.errb
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { p.cmd.Process.Signal(os.Interrupt); <-p.done })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, out)
		p.cmd.Wait()
		close(p.done)
	}()
	re := regexp.MustCompile(`^dlq: serving http://(\S+):(\d+)/`)
	select {
	case line := <-lines:
		m := re.FindStringSubmatch(line)
		if m == nil {
			w.t.Fatalf("dlq serve printed %q", line)
		}
		p.base = "http://127.0.0.1:" + m[2] // 0.0.0.0 and [::] answer on loopback too
	case <-p.done:
		w.t.Fatalf("dlq serve exited: %s", p.errb.String())
	case <-time.After(30 * time.Second):
		w.t.Fatalf("dlq serve printed no address in 30s: %s", p.errb.String())
	}
	return p
}

// deadKeys is the message_ids claim.dead holds, as dlq -json list reads them.
func (w *world) deadKeys() []string {
	w.t.Helper()
	r := w.run("dlq", "-json", "list")
	if r.code != 0 {
		w.t.Fatalf("dlq list: %d %s", r.code, r.stderr)
	}
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var row struct {
			MessageID string `json:"message_id"`
		}
		if line != "" && json.Unmarshal([]byte(line), &row) == nil {
			keys = append(keys, row.MessageID)
		}
	}
	slices.Sort(keys)
	return keys
}

// record reads the store's record of id.
func (w *world) record(id string) claim.Record {
	w.t.Helper()
	st, err := store.Open(w.db, store.Options{ReadOnly: true})
	if err != nil {
		w.t.Fatal(err)
	}
	defer st.Close()
	rec, _, err := st.Get(context.Background(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

// browser starts a headless Chromium, as root, with a profile of its own.
func browser(t *testing.T) context.Context {
	t.Helper()
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s: %v; scripts/test.sh installs it (apt-get install chromium chromium-driver)", chromium, err)
	}
	alloc, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(alloc)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// stepTimeout bounds one step in the browser: the browser itself lives as
// long as the test (its first Run's context has no timeout, as chromedp asks).
const stepTimeout = 60 * time.Second

func must(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates expr on the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// text is the visible text of the element sel names.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

// groupCounts reads the groups page: "reason status" -> count.
func groupCounts(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	pairs := eval[[][]string](t, ctx, `Array.from(document.querySelectorAll('section.group')).map(
		s => [s.dataset.reason + ' ' + s.dataset.status, s.querySelector('.count').textContent])`)
	m := map[string]string{}
	for _, p := range pairs {
		m[p[0]] = p[1]
	}
	return m
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*updateScreenshots {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "dlq", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

const xssClaimID = `</pre><script>window.pwned=1</script>`

// TestDLQServeBrowser is issue 15's "done when", in a real Chromium: after
// a consumer run with 422 and BUSY (503) claims the page shows two groups
// with the right counts; "Retry group" on BUSY, with the partner answering
// 201, delivers each once and claim.dead keeps only the 422s; an edit that
// changes nothing the partner checks comes back dead and shows as edited;
// an edit that adds a document is delivered; an edit that changes the guid
// is refused; a claim with <script> renders as text; the counts refresh by
// themselves.
func TestDLQServeBrowser(t *testing.T) {
	t.Parallel()
	browserScenario(t, newWorld(t), false)
}

// TestDLQServeBrowserIngesting is the same story in Chromium over dead
// letters ingested into the store as the page runs (issue 29's "done
// when"; TestDLQServeBrowserOverRows is the page's actions over rows
// ingested before it started): dlq serve -ingest takes claim.dead into
// the store's rows, and the page counts, retries, edits and refreshes
// them from there, a claim's <script> inert; on SQLite and on PostgreSQL.
func TestDLQServeBrowserIngesting(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) { browserScenario(t, newWorld(t), true) })
	t.Run("postgres", func(t *testing.T) {
		w := newWorld(t)
		w.db = pgtest.New(t)
		browserScenario(t, w, true)
	})
}

// browserScenario is TestDLQServeBrowser's story, over claim.dead or (rows)
// over the rows dlq serve -ingest writes.
func browserScenario(t *testing.T, w *world, rows bool) {
	xss := []byte(`{"guid":"xss-0","claimId":` + jsonString(xssClaimID) + `,"docs":[],"note":"<img src=x onerror=window.pwned=2>"}`)
	w.publishFiles(brokertest.Claim("nodocs-0", "C-N0"), brokertest.Claim("nodocs-1", "C-N1"), xss,
		brokertest.Claim("busy-0", "BUSY-0", "r.pdf"), brokertest.Claim("busy-1", "BUSY-1", "r.pdf"),
		brokertest.Claim("good-0", "C-0", "r.pdf"))
	c := w.start("consumer", "--claim", w.url, "--max-seconds", "600")
	brokertest.Eventually(t, 60*time.Second, "3 rejected and 2 failed twice in claim.dead", func() bool {
		if c.exited() {
			t.Fatalf("consumer exited: %s", c.errb.String())
		}
		return w.vh.Depth(t, topo.DeadQueue) == 5 && w.partner.Stats().Accepted["good-0"] == 1
	})

	serveArgs := []string{"-addr", "127.0.0.1:0", "-refresh", "2s"}
	if rows {
		serveArgs = append(serveArgs, "-ingest")
	}
	srv := w.startServe(nil, serveArgs...)
	if rows {
		// Acked only after its batch is committed: claim.dead empty is
		// every dead letter a row.
		brokertest.Eventually(t, 60*time.Second, "claim.dead ingested", func() bool {
			return w.vh.Depth(t, topo.DeadQueue) == 0
		})
	}
	ctx := browser(t)
	must(t, ctx, "load the groups page", chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible(chromedp.CSS(`section.group`)))
	if got, want := groupCounts(t, ctx), map[string]string{"rejected 422": "3", "failed-twice 503": "2"}; !mapsEqual(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	checkInert(t, ctx, "the groups page")
	if !rows {
		screenshot(t, ctx, "groups.png")
	}

	// Retry the BUSY group, the partner now answering 201.
	created := 201
	w.partner.Set(claimsys.Control{ForceStatus: &created})
	must(t, ctx, "retry the BUSY group",
		chromedp.Click(chromedp.CSS(`section[data-reason="failed-twice"] a.btn.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`#result`)))
	result := text(t, ctx, "#result")
	if !strings.Contains(result, "2 replayed, 0 skipped as delivered, 0 refused") {
		t.Fatalf("group retry reported %q", result)
	}
	brokertest.Eventually(t, 60*time.Second, "both BUSY claims delivered", func() bool {
		st := w.partner.Stats()
		return st.Accepted["busy-0"] == 1 && st.Accepted["busy-1"] == 1 && w.vh.Queues(t)[topo.Queue].Messages == 0
	})
	zero := 0
	w.partner.Set(claimsys.Control{ForceStatus: &zero}) // the fixture's rules again: no docs, 422
	for _, id := range []string{"busy-0", "busy-1"} {
		if rec := w.record(id); rec.State != "done" || w.partner.Stats().Accepted[id] != 1 {
			t.Errorf("%s: store state %q, accepted %d times; want done, once", id, rec.State, w.partner.Stats().Accepted[id])
		}
	}
	if got := w.deadKeys(); !slices.Equal(got, []string{"nodocs-0", "nodocs-1", "xss-0"}) {
		t.Fatalf("claim.dead after the group retry: %v, want the three 422s", got)
	}

	// The <script> claim renders as text, on its own page.
	must(t, ctx, "open the <script> claim", chromedp.Navigate(srv.base+"/claim?id=xss-0"), chromedp.WaitVisible(chromedp.CSS(`#body`)))
	body := text(t, ctx, "#body")
	if !strings.Contains(body, `"claimId": "\u003c/pre\u003e\u003cscript\u003e`) && !strings.Contains(body, xssClaimID) {
		t.Errorf("the body does not show the claimId as text:\n%s", body)
	}
	checkInert(t, ctx, "the claim page")

	// An edit that fixes nothing: the copy is rejected again, and the page
	// shows the dead letter as edited.
	edit := func(id, draft string) string {
		t.Helper()
		must(t, ctx, "edit "+id, chromedp.Navigate(srv.base+"/claim?id="+url.QueryEscape(id)), chromedp.WaitVisible(chromedp.CSS(`#draft`)),
			chromedp.SetValue(chromedp.CSS(`#draft`), draft), chromedp.Click(chromedp.CSS(`#edit-submit`)),
			chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#result`)))
		return text(t, ctx, "#result")
	}
	if res := edit("nodocs-1", `{"guid":"nodocs-1","claimId":"C-N1","docs":[],"amount":1300}`); !strings.Contains(res, "1 replayed") {
		t.Fatalf("edit of nodocs-1 reported %q", res)
	}
	brokertest.Eventually(t, 60*time.Second, "the edited nodocs-1 rejected again", func() bool {
		if rows { // dead-lettered again, then ingested: a new row
			return w.partner.Stats().ByGuid["nodocs-1"] == 2 && w.vh.Depth(t, topo.DeadQueue) == 0 && len(w.deadKeys()) == 3
		}
		return w.partner.Stats().ByGuid["nodocs-1"] == 2 && w.vh.Depth(t, topo.DeadQueue) == 3
	})
	must(t, ctx, "open the edited claim", chromedp.Navigate(srv.base+"/claim?id=nodocs-1"), chromedp.WaitVisible(chromedp.CSS(`#edited`)))
	failures := text(t, ctx, "#failures")
	if !strings.HasPrefix(failures, "2 failed") {
		t.Errorf("repeated failures: %q, want 2", failures)
	}
	if !rows {
		screenshot(t, ctx, "claim.png")
	}

	// An edit that changes the guid is refused, and nothing is replayed.
	must(t, ctx, "edit nodocs-0's guid", chromedp.Navigate(srv.base+"/claim?id=nodocs-0"), chromedp.WaitVisible(chromedp.CSS(`#draft`)),
		chromedp.SetValue(chromedp.CSS(`#draft`), `{"guid":"other","claimId":"C-N0","docs":["r.pdf"]}`), chromedp.Click(chromedp.CSS(`#edit-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#error`)))
	refusal := text(t, ctx, "#error")
	if !strings.Contains(refusal, `must stay "nodocs-0"`) || w.partner.Stats().ByGuid["other"] != 0 {
		t.Errorf("a guid change: %q", refusal)
	}

	// The fix: a document added. Delivered once, and recorded so.
	// Typed as a person does, on several lines (the form sends them CRLF).
	fixed := "{\n  \"guid\": \"nodocs-0\",\n  \"claimId\": \"C-N0\",\n  \"docs\": [\"report.pdf\"],\n  \"amount\": 1200\n}"
	if res := edit("nodocs-0", fixed); !strings.Contains(res, "1 replayed") {
		t.Fatalf("edit of nodocs-0 reported %q", res)
	}
	brokertest.Eventually(t, 60*time.Second, "the edited nodocs-0 delivered", func() bool {
		return w.partner.Stats().Accepted["nodocs-0"] == 1 && w.record("nodocs-0").State == "done"
	})
	if got := w.deadKeys(); !slices.Equal(got, []string{"nodocs-1", "xss-0"}) {
		t.Fatalf("claim.dead after the edit: %v", got)
	}

	// The counts refresh: a new 422 shows up on an open page by itself.
	must(t, ctx, "back to the groups", chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible(chromedp.CSS(`section.group`)))
	if got := groupCounts(t, ctx)["rejected 422"]; got != "2" {
		t.Fatalf("rejected: %s, want 2", got)
	}
	w.publishFiles(brokertest.Claim("nodocs-2", "C-N2"))
	brokertest.Eventually(t, 60*time.Second, "the open page counts the new dead letter", func() bool {
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('section.group[data-reason="rejected"] .count')||{}).textContent||''`))
		return n == "3"
	})
	c.stop(t)
}

// checkInert: no script of a claim ran, and none made it into the DOM.
func checkInert(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	pwned := eval[string](t, ctx, `typeof window.pwned`)
	scripts := eval[int](t, ctx, `document.querySelectorAll('script, img').length`)
	text := eval[string](t, ctx, `document.body.textContent`)
	if pwned != "undefined" || scripts != 0 {
		t.Errorf("%s: window.pwned is %s, %d script or img elements", where, pwned, scripts)
	}
	if !strings.Contains(text, "<script>") {
		t.Errorf("%s does not show the claim's <script> as text", where)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// deadLetter puts one message straight into claim.dead.
func (w *world) deadLetter(id string) {
	w.t.Helper()
	ch := w.vh.Channel(w.t)
	defer ch.Close()
	if err := ch.Publish("", topo.DeadQueue, false, false, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent,
		Body: brokertest.Claim(id, "C-"+id)}); err != nil {
		w.t.Fatal(err)
	}
}

// call makes one request and returns its status and body.
func call(t *testing.T, method, u string, form url.Values, header map[string]string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// groupID reads the first group's id from a groups page.
func groupID(t *testing.T, page string) string {
	t.Helper()
	m := regexp.MustCompile(`id="group-([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no group on the page:\n%s", page)
	}
	return m[1]
}

// TestDLQServeToken: on an address other than loopback, every page and
// every action answers 401 without the token (or with a wrong one), and
// nothing is done; with the token (bearer, or the login form's cookie) the
// page answers; the page shows neither the store's path nor the broker's
// password.
func TestDLQServeToken(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.deadLetter("tok-0")
	const token = "a-long-enough-test-token-0123456789"
	srv := w.startServe([]string{dlqweb.EnvToken + "=" + token}, "-addr", "0.0.0.0:0", "-no-store")
	bearer := map[string]string{"Authorization": "Bearer " + token}
	code, page := call(t, "GET", srv.base+"/", nil, bearer)
	if code != 200 || !strings.Contains(page, "tok-0") {
		t.Fatalf("with the token: %d\n%s", code, page)
	}
	group := groupID(t, page)
	form := url.Values{"action": {"purge"}, "group": {group}, "csrf": {"x"}, "id": {"tok-0"}, "body": {"{}"}, "step": {"go"}}
	requests := []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/claim?id=tok-0"}, {"GET", "/confirm?action=purge&group=" + group},
		{"GET", "/confirm?action=retry&id=tok-0"}, {"POST", "/action"}, {"POST", "/edit"}, {"GET", "/nothing-here"},
		{"POST", "/"}, {"GET", "/login"},
	}
	for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong-token-wrong-token-00"}, {"Cookie": "eaimq_dlq=" + token}} {
		for _, r := range requests {
			var f url.Values
			if r.method == "POST" {
				f = form
			}
			if code, body := call(t, r.method, srv.base+r.path, f, hdr); code != http.StatusUnauthorized {
				t.Errorf("%s %s with %v: %d, want 401\n%s", r.method, r.path, hdr, code, body)
			}
		}
	}
	if code, _ := call(t, "POST", srv.base+"/login", url.Values{"token": {"wrong"}}, nil); code != http.StatusUnauthorized {
		t.Errorf("login with a wrong token: %d", code)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 1 {
		t.Fatalf("claim.dead holds %d after the refused requests, want 1", n)
	}
	// The login form gives a cookie that works.
	code, _ = call(t, "POST", srv.base+"/login", url.Values{"token": {token}}, nil)
	req, _ := http.NewRequest("POST", srv.base+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil || code != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %d %v", code, err)
	}
	resp.Body.Close()
	cookie := resp.Cookies()[0]
	if !cookie.HttpOnly || cookie.Value == token {
		t.Errorf("cookie %+v: want HttpOnly, not the token itself", cookie)
	}
	if code, _ := call(t, "GET", srv.base+"/claim?id=tok-0", nil, map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}); code != 200 {
		t.Errorf("claim page with the cookie: %d", code)
	}
	// With the token but without the form's CSRF token, an action is
	// refused too.
	if code, _ := call(t, "POST", srv.base+"/action", form, bearer); code != http.StatusForbidden {
		t.Errorf("POST /action without the CSRF token: %d, want 403", code)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 1 {
		t.Fatalf("claim.dead holds %d, want 1", n)
	}
	_, claimPage := call(t, "GET", srv.base+"/claim?id=tok-0", nil, bearer)
	u, _ := url.Parse(w.vh.URL)
	pass, _ := u.User.Password()
	for _, secret := range []string{w.db, filepath.Base(w.db), pass, w.vh.URL} {
		if secret != "" && (strings.Contains(page, secret) || strings.Contains(claimPage, secret)) {
			t.Errorf("the page shows %q", secret)
		}
	}
}

// TestDLQServeReadOnly: -read-only shows no action and refuses every one,
// even a well-formed POST made by hand; the same POST to a page without
// -read-only does purge, so the refusal is -read-only's.
func TestDLQServeReadOnly(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.deadLetter("ro-0")
	ro := w.startServe(nil, "-addr", "127.0.0.1:0", "-read-only", "-no-store")
	code, page := call(t, "GET", ro.base+"/", nil, nil)
	if code != 200 || !strings.Contains(page, "ro-0") || strings.Contains(page, "Retry group") || strings.Contains(page, "<form") {
		t.Fatalf("read-only groups page: %d\n%s", code, page)
	}
	if _, claim := call(t, "GET", ro.base+"/claim?id=ro-0", nil, nil); strings.Contains(claim, "<form") || strings.Contains(claim, "csrf") {
		t.Errorf("the read-only claim page has a form:\n%s", claim)
	}
	group := groupID(t, page)

	rw := w.startServe(nil, "-addr", "127.0.0.1:0", "-no-store")
	_, confirm := call(t, "GET", rw.base+"/confirm?action=purge&group="+group, nil, nil)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(confirm)
	if m == nil {
		t.Fatalf("no CSRF token on the confirmation page:\n%s", confirm)
	}
	form := url.Values{"action": {"purge"}, "group": {group}, "csrf": {m[1]}}
	for _, r := range []struct {
		method, path string
		form         url.Values
	}{
		{"POST", "/action", form}, {"POST", "/action", url.Values{"action": {"retry"}, "id": {"ro-0"}, "csrf": {m[1]}}},
		{"POST", "/edit", url.Values{"id": {"ro-0"}, "step": {"go"}, "csrf": {m[1]}, "body": {string(brokertest.Claim("ro-0", "C", "r.pdf"))}}},
		{"GET", "/confirm?action=purge&group=" + group, nil},
	} {
		code, body := call(t, r.method, ro.base+r.path, r.form, nil)
		if code != http.StatusForbidden || !strings.Contains(body, "-read-only") {
			t.Errorf("read-only %s %s: %d, want 403\n%s", r.method, r.path, code, body)
		}
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 1 {
		t.Fatalf("claim.dead holds %d after the read-only page was asked to act, want 1", n)
	}
	code, body := call(t, "POST", rw.base+"/action", form, nil)
	if code != 200 || !strings.Contains(body, "1 purged") {
		t.Fatalf("the same POST without -read-only: %d\n%s", code, body)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 0 {
		t.Errorf("claim.dead holds %d after the purge, want 0", n)
	}
}
