package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/topo"
)

// TestDLQServeBrowserOverRows: once dlq ingest took claim.dead into the
// store, the page in Chromium shows the ingested dead letters (the
// groups, a claim) and acts on their rows: a purge keeps the row as the
// store's archive (claim.dead.archive stays empty), the archive page
// lists it and restores it, and a group retry sends each claim once (the
// partner accepting each once), after which the rows are gone from the
// page and from dlq list.
func TestDLQServeBrowserOverRows(t *testing.T) {
	t.Parallel()
	w := rejectedThree(t)
	in := w.start("dlq", "ingest", "-batch", "2")
	brokertest.Eventually(t, 60*time.Second, "claim.dead ingested", func() bool {
		q := w.vh.Queues(t)[topo.DeadQueue]
		return q.Messages == 0 && q.Unacked == 0
	})
	in.stop(t)

	srv := w.startServe(nil, "-addr", "127.0.0.1:0", "-refresh", "0")
	ctx := browser(t)
	must(t, ctx, "load the groups page", chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible(chromedp.CSS(`section.group`)))
	if got, want := groupCounts(t, ctx), map[string]string{"rejected 422": "3"}; !mapsEqual(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}

	must(t, ctx, "purge arch-b", chromedp.Navigate(srv.base+"/claim?id=arch-b"), chromedp.WaitVisible(chromedp.CSS(`a.btn.danger`)),
		chromedp.Click(chromedp.CSS(`a.btn.danger`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	// The confirmation says where the purge puts it: the store's archive,
	// not claim.dead.archive.
	if warn := text(t, ctx, "p.warn"); !strings.Contains(warn, "the store's archive") || strings.Contains(warn, "claim.dead.archive") {
		t.Errorf("the purge's confirmation over rows: %q", warn)
	}
	must(t, ctx, "confirm the purge", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if res := text(t, ctx, "#result"); !strings.HasPrefix(res, "1 purged into the store's archive") {
		t.Fatalf("purge: %q", res)
	}
	if d := w.depths(); d != [2]int{0, 0} {
		t.Fatalf("after the page's purge of a row: claim.dead and the archive queue hold %v, want nothing", d)
	}
	must(t, ctx, "the archive", chromedp.Navigate(srv.base+"/archive"), chromedp.WaitVisible(chromedp.CSS(`#refs`)))
	if rows := text(t, ctx, "#refs"); !brokertest.ContainsAll(rows, "arch-b", "C-ARCH-B") {
		t.Errorf("the archive page:\n%s", rows)
	}
	must(t, ctx, "restore arch-b", chromedp.Click(chromedp.CSS(`#restore-arch-b`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
		chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if res := text(t, ctx, "#result"); !strings.HasPrefix(res, "1 restored to the store's dead letters") {
		t.Fatalf("restore: %q", res)
	}

	// Retry the group, the partner now answering 201.
	created := 201
	w.partner.Set(claimsys.Control{ForceStatus: &created})
	must(t, ctx, "retry the group", chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible(chromedp.CSS(`section.group`)),
		chromedp.Click(chromedp.CSS(`section[data-reason="rejected"] a.btn.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if res := text(t, ctx, "#result"); !strings.Contains(res, "3 replayed, 0 skipped as delivered, 0 refused") {
		t.Fatalf("group retry reported %q", res)
	}
	if r := w.run("consumer", "--claim", w.url, "--max-seconds", "3"); r.code != 0 {
		t.Fatalf("consumer: %d %s", r.code, r.stderr)
	}
	for _, id := range []string{"arch-a", "arch-b", "arch-c"} {
		if n := w.partner.Stats().Accepted[id]; n != 1 {
			t.Errorf("%s accepted %d times, want once", id, n)
		}
	}
	if r := w.run("dlq", "list"); r.code != 0 || !strings.Contains(r.stdout, "0 dead letter(s) listed of 0 looked at") {
		t.Errorf("dlq list after the retry: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	must(t, ctx, "the groups again", chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible(chromedp.CSS(`body`)))
	if got := groupCounts(t, ctx); len(got) != 0 {
		t.Errorf("groups after the retry: %v, want none", got)
	}
}
