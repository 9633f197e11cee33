package dlqweb

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// world is a temporary vhost with the topology, the claim-system
// stand-in, and the path of the consumer's store, as dlq/main_test.go
// makes it, for the web backend's tests.
type world struct {
	t       *testing.T
	vh      *brokertest.VHost
	partner *claimsys.Server
	url, db string
}

func newWorld(t *testing.T) *world {
	vh := brokertest.New(t)
	vh.Topology(t)
	p := claimsys.New()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &world{t: t, vh: vh, partner: p, url: srv.URL, db: filepath.Join(t.TempDir(), "processed.db")}
}

// consume runs the real consumer binary for a few seconds.
func (w *world) consume(seconds string) {
	w.t.Helper()
	cmd := exec.Command(brokertest.Binary(w.t, "eaimq/consumer"), "--claim", w.url, "--max-seconds", seconds, "--log-level", "warn")
	cmd.Env = append(os.Environ(), broker.EnvURL+"="+w.vh.URL, store.EnvPath+"="+w.db)
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("consumer: %v\n%s", err, out)
	}
}

// mixedRun leaves two 422s and two BUSYs in claim.dead and delivers three.
func mixedRun(t *testing.T) *world {
	w := newWorld(t)
	w.vh.PublishClaims(t,
		brokertest.Claim("good-0", "C-0", "r.pdf"), brokertest.Claim("good-1", "C-1", "r.pdf"), brokertest.Claim("good-2", "C-2", "r.pdf"),
		brokertest.Claim("nodocs-0", "C-N0"), brokertest.Claim("nodocs-1", "C-N1"),
		brokertest.Claim("busy-0", "BUSY-0", "r.pdf"), brokertest.Claim("busy-1", "BUSY-1", "r.pdf"))
	w.consume("2")
	if n := w.vh.Depth(t, topo.DeadQueue); n != 4 {
		t.Fatalf("setup: claim.dead holds %d, want 4", n)
	}
	return w
}

// deadLetter puts messages straight into claim.dead, confirmed.
func (w *world) deadLetter(msgs ...amqp.Publishing) { w.t.Helper(); w.vh.DeadLetter(w.t, msgs...) }
