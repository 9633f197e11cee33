package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
	"eaimq/internal/topo/check"
	"eaimq/internal/topo/topotest"
)

// runMigrate runs a migration of vh to type to, with the hook afterMove,
// on a connection of its own, as topology -migrate does: the exit code
// main would choose, stdout, and the error's text as stderr.
func runMigrate(t *testing.T, vh *brokertest.VHost, to topo.QueueType, afterMove func(int) error) (code int, stdout, stderr string) {
	t.Helper()
	conn := vh.Dial(t)
	defer broker.Close(conn)
	var out bytes.Buffer
	err := Run(context.Background(), conn, Config{VHost: vh.Name, To: to, AfterMove: afterMove}, &out)
	if err != nil {
		stderr = err.Error()
	}
	return cli.Code(err), out.String(), stderr
}

// runCheck is topology -check -queue-type kind, as runMigrate runs a
// migration.
func runCheck(t *testing.T, vh *brokertest.VHost, kind topo.QueueType) (code int, stdout, stderr string) {
	t.Helper()
	conn := vh.Dial(t)
	defer broker.Close(conn)
	var out bytes.Buffer
	err := check.Run(context.Background(), conn, check.Config{URL: vh.URL, VHost: vh.Name, Kind: kind}, &out)
	if err != nil {
		stderr = err.Error()
	}
	return cli.Code(err), out.String(), stderr
}

// migrationWorld is a classic topology holding claims claims in claim.in
// and dead in claim.dead, each with properties and headers to keep.
func migrationWorld(t *testing.T, claims, dead int) (*brokertest.VHost, map[string]amqp.Publishing) {
	t.Helper()
	vh := brokertest.New(t)
	vh.Topology(t)
	want := map[string]amqp.Publishing{}
	// Dead letters as the broker leaves them: rejected from claim.in, with
	// their x-death header, which dlq reads. First, while claim.in holds
	// nothing else.
	if dead > 0 {
		ch := vh.Channel(t)
		for i, c := range brokertest.Claims("dead", "C-dead", dead, false) {
			id := fmt.Sprintf("dead-%03d", i)
			vh.Publish(t, amqp.Publishing{MessageId: id, Body: c})
			want[id] = amqp.Publishing{MessageId: id, Body: c}
			d, ok, err := ch.Get(topo.Queue, false)
			if err != nil || !ok || d.MessageId != id {
				t.Fatalf("get %s: %v %v %q", id, ok, err, d.MessageId)
			}
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
		}
		brokertest.Eventually(t, 10*time.Second, "dead letters in claim.dead", func() bool { return vh.Depth(t, topo.DeadQueue) == dead })
	}
	var msgs []amqp.Publishing
	for i, c := range brokertest.Claims("mig", "C-mig", claims, true) {
		id := fmt.Sprintf("mig-%03d", i)
		m := amqp.Publishing{MessageId: id, Body: c, CorrelationId: "corr-" + id, AppId: "quorum_test",
			Type: "claim", Priority: 3, Timestamp: time.Unix(1700000000+int64(i), 0),
			Headers: amqp.Table{"x-test-seq": int32(i), "x-test-origin": "classic"}}
		msgs = append(msgs, m)
		want[id] = m
	}
	vh.Publish(t, msgs...)
	return vh, want
}

// checkMoved drains claim.in and claim.dead and fails the test unless each
// message published is in the queue it was in, exactly once, with its body,
// properties and headers.
func checkMoved(t *testing.T, vh *brokertest.VHost, want map[string]amqp.Publishing, claims, dead, maxDup int) {
	t.Helper()
	seen := map[string]int{}
	for queue, n := range map[string]int{topo.Queue: claims, topo.DeadQueue: dead} {
		got := vh.Drain(t, queue)
		if len(got) < n || len(got) > n+maxDup {
			t.Errorf("%s: %d messages, want %d (and at most %d duplicates)", queue, len(got), n, maxDup)
		}
		for _, d := range got {
			seen[d.MessageId]++
			w, ok := want[d.MessageId]
			if !ok {
				t.Errorf("%s: unexpected message %q", queue, d.MessageId)
				continue
			}
			if string(d.Body) != string(w.Body) || d.DeliveryMode != amqp.Persistent || d.ContentType != "application/json" ||
				d.CorrelationId != w.CorrelationId || d.AppId != w.AppId || d.Type != w.Type || d.Priority != w.Priority ||
				!d.Timestamp.Equal(w.Timestamp) {
				t.Errorf("%s: %s changed in the move: %+v", queue, d.MessageId, d)
			}
			for k, v := range w.Headers {
				if fmt.Sprint(d.Headers[k]) != fmt.Sprint(v) {
					t.Errorf("%s: %s header %s = %v, want %v", queue, d.MessageId, k, d.Headers[k], v)
				}
			}
			if queue == topo.DeadQueue && d.Headers["x-death"] == nil {
				t.Errorf("claim.dead: %s lost its x-death header", d.MessageId)
			}
		}
	}
	dups := 0
	for id := range want {
		if seen[id] == 0 {
			t.Errorf("LOST %s", id)
		}
		if seen[id] > 1 {
			dups += seen[id] - 1
		}
	}
	if dups > maxDup {
		t.Errorf("%d duplicates, want at most %d", dups, maxDup)
	}
}

// TestMigrateToQuorum: 1,000 claims in a classic claim.in and 50 in
// claim.dead move to quorum queues of the same names, each once, intact;
// and back to classic with the same code.
func TestMigrateToQuorum(t *testing.T) {
	const claims, dead = 1000, 50
	vh, want := migrationWorld(t, claims, dead)
	code, stdout, stderr := runMigrate(t, vh, topo.Quorum, nil)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("moved %d claim(s)\n", claims+dead)) {
		t.Fatalf("-migrate quorum: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("-migrate quorum:\n%s", stdout)
	topotest.WantTypes(t, vh, topo.Quorum)
	// Counted with a passive declare: list_queues shows a quorum queue's
	// depth as of its last stats emission, seconds old.
	if in, d := vh.Depth(t, topo.Queue), vh.Depth(t, topo.DeadQueue); in != claims || d != dead {
		t.Errorf("after -migrate quorum: claim.in %d, claim.dead %d", in, d)
	}
	if code, stdout, stderr := runCheck(t, vh, topo.Quorum); code != 0 {
		t.Errorf("-check -queue-type quorum after the migration: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, _ := runMigrate(t, vh, topo.Quorum, nil); code != 0 || !strings.Contains(stdout, "already a quorum queue") {
		t.Errorf("-migrate quorum again: exit %d\n%s", code, stdout)
	}
	if code, stdout, stderr := runMigrate(t, vh, topo.Classic, nil); code != 0 {
		t.Fatalf("-migrate classic: exit %d\n%s%s", code, stdout, stderr)
	}
	topotest.WantTypes(t, vh, topo.Classic)
	checkMoved(t, vh, want, claims, dead, 0)
}

// TestMigrateResumes: a migration stopped after some batches, in the first
// hop (claim.in -> claim.in.migrating) or the second (back into the new
// claim.in), is finished by running it again: nothing lost, no duplicate.
//
// Except for one broker bug: a quorum queue can drop acks that arrive just
// before their channel closes (rabbitmq-server#10327, seen here on 3.10:
// 67 of the last batch of 100), and return those claims, though their
// copies are confirmed. The first hop takes from the classic queue and
// has no such excuse; the second takes from the quorum claim.in.migrating,
// so there up to one batch may come back twice, with one message_id each,
// which the consumer's dedup record absorbs. Nothing may be lost either way.
func TestMigrateResumes(t *testing.T) {
	const claims = 500 // five batches a hop
	for _, tc := range []struct {
		name   string
		stopAt int // the hook's call that stops the run
		maxDup int
	}{
		{"in the first hop", 3, 0},
		{"in the second hop", 8, moveWindow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vh, want := migrationWorld(t, claims, 0)
			calls := 0
			afterMove := func(int) error {
				if calls++; calls == tc.stopAt {
					return errors.New("simulated crash")
				}
				return nil
			}
			code, stdout, stderr := runMigrate(t, vh, topo.Quorum, afterMove)
			if code == 0 || calls != tc.stopAt || !strings.Contains(stderr, "run topology -migrate quorum again to finish") {
				t.Fatalf("the hook did not stop the migration (exit %d, %d calls):\n%s%s", code, calls, stdout, stderr)
			}
			if qs := topotest.ListQueues(t, vh); qs[migrating(topo.Queue)].Type != "quorum" {
				t.Fatalf("after the stop: no quorum claim.in.migrating: %+v", qs)
			}
			in, tmp := vh.Depth(t, topo.Queue), vh.Depth(t, migrating(topo.Queue))
			if in+tmp < claims || in+tmp > claims+tc.maxDup || in == 0 || tmp == 0 {
				t.Fatalf("after the stop: claim.in %d, claim.in.migrating %d; want %d claims between them (at most %d twice), in both",
					in, tmp, claims, tc.maxDup)
			}
			if code, stdout, stderr := runMigrate(t, vh, topo.Quorum, nil); code != 0 {
				t.Fatalf("rerun: exit %d\n%s%s", code, stdout, stderr)
			}
			topotest.WantTypes(t, vh, topo.Quorum)
			checkMoved(t, vh, want, claims, 0, tc.maxDup)
		})
	}
}

// TestMigrateRefusesWithConsumer: a consumer on claim.in would race the
// move; -migrate refuses (78) before changing anything.
func TestMigrateRefusesWithConsumer(t *testing.T) {
	vh, _ := migrationWorld(t, 5, 0)
	ch := vh.Channel(t)
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume(topo.Queue, "racer", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runMigrate(t, vh, topo.Quorum, nil)
	if code != cli.ExitConfig || !strings.Contains(stderr, "1 consumer(s) attached to claim.in") || !strings.Contains(stderr, "stop the consumers first") {
		t.Fatalf("exit %d, want %d and the refusal:\n%s%s", code, cli.ExitConfig, stdout, stderr)
	}
	qs := topotest.ListQueues(t, vh)
	// The contract's two, and the archive the world's topology declared.
	if len(qs) != 3 || qs[topo.Queue].Type != "classic" || qs[topo.DeadQueue].Type != "classic" {
		t.Errorf("the refusal changed the queues: %+v", qs)
	}
}

// TestMigrateRefusesWhileLocked: while another connection holds the
// migration lock (a running migration, or a dead one's connection the
// broker has not closed yet), -migrate exits 75 and moves nothing.
func TestMigrateRefusesWhileLocked(t *testing.T) {
	vh, _ := migrationWorld(t, 5, 0)
	ch := vh.Channel(t)
	if _, err := ch.QueueDeclare(lockQueue, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runMigrate(t, vh, topo.Quorum, nil)
	if code != cli.ExitTempFail || !strings.Contains(stderr, "another topology -migrate is running") {
		t.Fatalf("exit %d, want %d and why:\n%s%s", code, cli.ExitTempFail, stdout, stderr)
	}
	if qs := topotest.ListQueues(t, vh); qs[topo.Queue].Type != "classic" || qs[topo.Queue].Messages != 5 {
		t.Errorf("claim.in changed: %+v", qs[topo.Queue])
	}
}

// TestMigrateGivesTheLimit: quorum queues an older eaimq declared, without
// x-delivery-limit, holding claims and dead letters, are moved by -migrate
// quorum into quorum queues with the limit, each claim once and intact;
// -check then finds them as the contract says.
func TestMigrateGivesTheLimit(t *testing.T) {
	const claims, dead = 150, 10
	vh := brokertest.New(t)
	topotest.DeclareOlderQuorum(t, vh)
	ch := vh.Channel(t)
	want := map[string]amqp.Publishing{}
	var msgs []amqp.Publishing
	for i, c := range brokertest.Claims("old", "C-old", claims+dead, true) {
		id := fmt.Sprintf("old-%03d", i)
		m := amqp.Publishing{MessageId: id, Body: c, CorrelationId: "corr-" + id, AppId: "limit_test", Timestamp: time.Unix(1700000000, 0)}
		msgs = append(msgs, m)
		want[id] = m
	}
	vh.Publish(t, msgs...)
	for range dead { // the first ones published, rejected by the broker's own route
		d, ok, err := ch.Get(topo.Queue, false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		d.Reject(false)
	}
	brokertest.Eventually(t, 10*time.Second, "dead letters in claim.dead", func() bool { return vh.Depth(t, topo.DeadQueue) == dead })

	code, stdout, stderr := runMigrate(t, vh, topo.Quorum, nil)
	if code != 0 || !strings.Contains(stdout, "claim.in: quorum (without x-delivery-limit) -> quorum") ||
		!strings.Contains(stdout, fmt.Sprintf("moved %d claim(s)\n", claims+dead)) {
		t.Fatalf("-migrate quorum: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("-migrate quorum:\n%s", stdout)
	topotest.WantTypes(t, vh, topo.Quorum)
	if code, stdout, stderr := runCheck(t, vh, topo.Quorum); code != 0 || strings.Contains(stdout, "without x-delivery-limit") {
		t.Errorf("-check -queue-type quorum after the migration: exit %d\n%s%s", code, stdout, stderr)
	}
	// Quorum to quorum: the second hop takes from a quorum queue
	// (rabbitmq-server#10327: see TestMigrateResumes), but an uninterrupted
	// run keeps that channel open until the queue is gone: no duplicates.
	checkMoved(t, vh, want, claims, dead, 0)
}
