package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/audit"
	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
	"eaimq/internal/topo/topotest"
)

// rejectedThree leaves three 422s in claim.dead, dead-lettered by the
// real consumer (so each has the broker's x-death), in a world whose
// topology.py declared the archive.
func rejectedThree(t *testing.T) *world {
	w := newWorld(t)
	w.publishFiles(brokertest.Claim("arch-a", "C-ARCH-A"), brokertest.Claim("arch-b", "C-ARCH-B"), brokertest.Claim("arch-c", "C-ARCH-C"))
	if r := w.run("consumer", "--claim", w.url, "--max-seconds", "3"); r.code != 0 {
		t.Fatalf("consumer: %d %s", r.code, r.stderr)
	}
	if n := w.vh.Depth(t, topo.DeadQueue); n != 3 {
		t.Fatalf("setup: claim.dead holds %d, want 3", n)
	}
	return w
}

// depths is claim.dead's and the archive's ready messages.
func (w *world) depths() [2]int {
	w.t.Helper()
	return [2]int{w.vh.Depth(w.t, topo.DeadQueue), w.vh.Depth(w.t, topo.ArchiveQueue)}
}

// archiveRows is dlq -json -archive list's rows by message_id.
func (w *world) archiveRows() map[string]map[string]any {
	w.t.Helper()
	r := w.run("dlq", "-json", "-archive", "list")
	if r.code != 0 {
		w.t.Fatalf("dlq -archive list: %d %s", r.code, r.stderr)
	}
	rows := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var row map[string]any
		if line != "" && json.Unmarshal([]byte(line), &row) == nil {
			rows[row["message_id"].(string)] = row
		}
	}
	return rows
}

// TestArchivePurgeRestore: purge moves a dead letter to claim.dead.archive
// (topology declared it with its 14 days' TTL) with its x-death and who
// purged it; the archive lists and shows it; restore by guid and by
// claimId puts it back in claim.dead as it was (x-death kept, the purge
// header gone); a second restore, or an unknown id, names nothing (exit
// 1); -no-archive deletes for good; each is in the audit trail; and
// restore refuses without its store (74).
func TestArchivePurgeRestore(t *testing.T) {
	t.Parallel()
	w := rejectedThree(t)
	q := topotest.ListQueues(t, w.vh)[topo.ArchiveQueue]
	if ttl, _ := q.Arguments["x-message-ttl"].(json.Number); ttl != "1209600000" {
		t.Errorf("claim.dead.archive arguments %v, want x-message-ttl 1209600000", q.Arguments)
	}

	r := w.run("dlq", "-yes", "purge", "arch-a")
	if r.code != 0 || !brokertest.ContainsAll(r.stdout, "archived arch-a", "purged 1 dead letter(s) into claim.dead.archive") {
		t.Fatalf("purge arch-a: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := w.depths(); d != [2]int{2, 1} {
		t.Fatalf("after purge: claim.dead, archive = %v, want [2 1]", d)
	}
	row := w.archiveRows()["arch-a"]
	purged, _ := row["purged"].(map[string]any)
	if row == nil || purged == nil || purged["by"] == "" || purged["via"] != "dlq purge" || row["broker_reason"] != "rejected" ||
		row["from_queue"] != "claim.in" || row["reason"] != "rejected" {
		t.Errorf("the archive's row of arch-a: %v", row)
	}
	if r := w.run("dlq", "-archive", "list"); r.code != 0 || !brokertest.ContainsAll(r.stdout, "arch-a", "purged 20", "claim.dead.archive keeps them all") {
		t.Errorf("dlq -archive list: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := w.run("dlq", "-archive", "show", "C-ARCH-A"); r.code != 0 || !brokertest.ContainsAll(r.stdout, "purged:", "dlq restore arch-a", "x-death") {
		t.Errorf("dlq -archive show: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = w.run("dlq", "restore", "arch-a")
	if r.code != 0 || !brokertest.ContainsAll(r.stdout, "restored arch-a", "restored 1 dead letter(s) to claim.dead") {
		t.Fatalf("restore arch-a: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := w.depths(); d != [2]int{3, 0} {
		t.Fatalf("after restore: %v, want [3 0]", d)
	}
	r = w.run("dlq", "-json", "show", "arch-a")
	var shown struct {
		Broker  string         `json:"broker_reason"`
		Purged  any            `json:"purged"`
		Headers map[string]any `json:"headers"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &shown) != nil || shown.Broker != "rejected" || shown.Purged != nil ||
		shown.Headers["x-death"] == nil || shown.Headers["x-eaimq-purged"] != nil {
		t.Errorf("arch-a back in claim.dead: %d %+v\n%s", r.code, shown, r.stderr)
	}
	for _, id := range []string{"arch-a", "nope"} {
		if r := w.run("dlq", "restore", id); r.code != cli.ExitFailure || !strings.Contains(r.stderr, `"`+id+`" in claim.dead.archive`) {
			t.Errorf("restore %s not in the archive: %d\n%s%s", id, r.code, r.stdout, r.stderr)
		}
	}

	// By claimId, both ways.
	if r := w.run("dlq", "-yes", "purge", "C-ARCH-B"); r.code != 0 || !strings.Contains(r.stdout, "archived arch-b") {
		t.Fatalf("purge C-ARCH-B: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := w.runEnv([]string{"EAI_MQ_DB=/nonexistent/processed.db"}, "dlq", "restore", "C-ARCH-B"); r.code != cli.ExitIOErr || acted(r.stdout) {
		t.Errorf("restore without its store: %d, want %d\n%s%s", r.code, cli.ExitIOErr, r.stdout, r.stderr)
	}
	if r := w.run("dlq", "restore", "C-ARCH-B"); r.code != 0 || !strings.Contains(r.stdout, "restored arch-b") {
		t.Fatalf("restore C-ARCH-B: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	if r := w.run("dlq", "-yes", "-no-archive", "purge", "arch-c"); r.code != 0 || !brokertest.ContainsAll(r.stdout, "deleted arch-c", "purged 1 dead letter(s)\n") {
		t.Fatalf("purge -no-archive: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := w.depths(); d != [2]int{2, 0} {
		t.Fatalf("after purge -no-archive: %v, want [2 0]", d)
	}

	r = w.run("dlq", "-json", "history")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e audit.Entry
		if json.Unmarshal([]byte(line), &e) != nil {
			t.Fatalf("history line %q", line)
		}
		got = append(got, e.Action+" "+e.Archive+" "+e.Result+" "+strings.Join(e.IDs, ","))
	}
	want := []string{"purge claim.dead.archive done arch-a", "restore  done arch-a", "restore  partial ", "restore  partial ",
		"purge claim.dead.archive done arch-b", "restore  done arch-b", "purge  done arch-c"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("history:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := w.run("dlq", "history", "arch-a"); !brokertest.ContainsAll(r.stdout, "archived in claim.dead.archive (1): arch-a", "restored to claim.dead (1): arch-a") {
		t.Errorf("history arch-a:\n%s", r.stdout)
	}
}

// store makes the consumer's store: a consumer run with nothing to do.
func (w *world) store() {
	w.t.Helper()
	if r := w.run("consumer", "--claim", w.url, "--max-seconds", "1"); r.code != 0 {
		w.t.Fatalf("consumer: %d %s", r.code, r.stderr)
	}
}

// acted says whether a dlq command's stdout reports acting on anything.
func acted(out string) bool {
	return strings.Contains(out, "archived ") || strings.Contains(out, "restored ") || strings.Contains(out, "deleted ")
}

// TestArchiveMissingRefuses: without claim.dead.archive, purge refuses
// before it touches anything (78, one line naming topology and
// -no-archive), the dry run too; restore says to run topology.
func TestArchiveMissingRefuses(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.store()
	ch := w.vh.Channel(t)
	if _, err := ch.QueueDelete(topo.ArchiveQueue, false, false, false); err != nil {
		t.Fatal(err)
	}
	w.deadLetter("lonely")
	brokertest.Eventually(t, 10*time.Second, "the dead letter queued", func() bool { return w.vh.Depth(t, topo.DeadQueue) == 1 })
	for _, args := range [][]string{{"-yes", "purge", "lonely"}, {"purge", "lonely"}, {"-yes", "purge", "-all"}} {
		r := w.run("dlq", args...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != cli.ExitConfig || len(lines) != 1 || !brokertest.ContainsAll(lines[0], "claim.dead.archive does not exist", "run topology", "-no-archive", "nothing was purged") || acted(r.stdout) {
			t.Errorf("%q without the archive: %d, want %d and one line\n%s%s", args, r.code, cli.ExitConfig, r.stdout, r.stderr)
		}
	}
	if w.vh.Depth(t, topo.DeadQueue) != 1 {
		t.Fatal("a refused purge touched claim.dead")
	}
	if r := w.run("dlq", "history"); strings.Contains(r.stdout, "purge") {
		t.Errorf("a refused purge is in the audit trail:\n%s", r.stdout)
	}
	if r := w.run("dlq", "restore", "lonely"); r.code != cli.ExitConfig || !brokertest.ContainsAll(r.stderr, "claim.dead.archive", "topology") {
		t.Errorf("restore without the archive: %d\n%s", r.code, r.stderr)
	}
}

// TestArchiveRefusedKeepsDeadLetter: confirm before ack. An archive that
// refuses the copy (a queue that holds nothing and nacks what comes:
// x-max-length 0, x-overflow reject-publish) leaves the dead letter in
// claim.dead, and the purge says so (exit 1, a partial entry).
func TestArchiveRefusedKeepsDeadLetter(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.store()
	ch := w.vh.Channel(t)
	if _, err := ch.QueueDelete(topo.ArchiveQueue, false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(topo.ArchiveQueue, true, false, false, false, amqp.Table{"x-max-length": int64(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	w.deadLetter("kept")
	brokertest.Eventually(t, 10*time.Second, "the dead letter queued", func() bool { return w.vh.Depth(t, topo.DeadQueue) == 1 })
	r := w.run("dlq", "-yes", "purge", "kept")
	if r.code != cli.ExitFailure || !brokertest.ContainsAll(r.stderr, "kept: not purged", "nacked") || strings.Contains(r.stdout, "archived kept") {
		t.Errorf("purge into a refusing archive: %d, want %d\n%s%s", r.code, cli.ExitFailure, r.stdout, r.stderr)
	}
	if d := w.depths(); d != [2]int{1, 0} {
		t.Errorf("after the refused purge: %v, want the dead letter still in claim.dead [1 0]", d)
	}
	var e audit.Entry
	r = w.run("dlq", "-json", "history", "kept")
	if json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &e) != nil || e.Result != audit.Partial || len(e.IDs) != 0 || len(e.NotDone) != 1 {
		t.Errorf("history of the refused purge: %s", r.stdout)
	}
}

// TestArchiveBrowser: in a real Chromium, a claim purged on the page is on
// the archive page, with who purged it, and its Restore puts it back in
// claim.dead; the history of both is on the claim's page.
func TestArchiveBrowser(t *testing.T) {
	t.Parallel()
	w := rejectedThree(t)
	srv := w.startServe(nil, "-refresh", "0")
	ctx := browser(t)
	must(t, ctx, "purge arch-b", chromedp.Navigate(srv.base+"/claim?id=arch-b"), chromedp.WaitVisible(chromedp.CSS(`a.btn.danger`)),
		chromedp.Click(chromedp.CSS(`a.btn.danger`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if warn := text(t, ctx, "p.warn"); !strings.Contains(warn, "claim.dead.archive") {
		t.Errorf("the purge's confirmation: %q", warn)
	}
	must(t, ctx, "confirm the purge", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if res := text(t, ctx, "#result"); !strings.Contains(res, "1 purged into claim.dead.archive") {
		t.Fatalf("purge: %q", res)
	}
	if d := w.depths(); d != [2]int{2, 1} {
		t.Fatalf("after the page's purge: %v, want [2 1]", d)
	}
	must(t, ctx, "the archive", chromedp.Click(chromedp.CSS(`#archive-link`)), chromedp.WaitVisible(chromedp.CSS(`#refs`)))
	if rows := text(t, ctx, "#refs"); !brokertest.ContainsAll(rows, "arch-b", "C-ARCH-B") {
		t.Errorf("the archive page:\n%s", rows)
	}
	screenshot(t, ctx, "archive.png")
	must(t, ctx, "restore arch-b", chromedp.Click(chromedp.CSS(`#restore-arch-b`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
		chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if res := text(t, ctx, "#result"); !strings.Contains(res, "1 restored to claim.dead") {
		t.Fatalf("restore: %q", res)
	}
	if d := w.depths(); d != [2]int{3, 0} {
		t.Fatalf("after the page's restore: %v, want [3 0]", d)
	}
	must(t, ctx, "the archive again", chromedp.Navigate(srv.base+"/archive"), chromedp.WaitVisible(chromedp.CSS(`#none`)))
	must(t, ctx, "arch-b's page", chromedp.Navigate(srv.base+"/claim?id=arch-b"), chromedp.WaitVisible(chromedp.CSS(`#events`)))
	if ev := text(t, ctx, "#events"); !brokertest.ContainsAll(ev, "purge", "archived in claim.dead.archive", "restore", "restored to claim.dead") {
		t.Errorf("arch-b's history:\n%s", ev)
	}
}
