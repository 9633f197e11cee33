package metrics

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Ingest is dlq ingest's metrics (-metrics-addr), so that a table
// at its size bound, or a store that stopped ingestion, is an alert and
// not only a line in the journal: the disk must never fill silently, and
// dead letters left in claim.dead must not go unseen.
type Ingest struct {
	reg        *prometheus.Registry
	rows       prometheus.Gauge
	maxRows    prometheus.Gauge
	stopped    *prometheus.GaugeVec
	ingested   prometheus.Counter
	duplicates prometheus.Counter
}

// The reasons of eaimq_dlq_ingest_stopped.
const (
	StoppedFull  = "full"  // at -max-rows
	StoppedStore = "store" // the store failed
)

// NewIngest makes the metrics on a private registry.
func NewIngest() *Ingest {
	m := &Ingest{
		reg: prometheus.NewRegistry(),
		rows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eaimq_dlq_ingested_rows",
			Help: "Dead letters in the store's table (dlq ingest's count).",
		}),
		maxRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eaimq_dlq_ingest_max_rows",
			Help: "dlq ingest's size bound (-max-rows): at it, ingestion stops taking more.",
		}),
		stopped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eaimq_dlq_ingest_stopped",
			Help: "1 while dlq ingest takes nothing, by why: full (at -max-rows) or store (the store failed); claim.dead keeps the dead letters meanwhile.",
		}, []string{"reason"}),
		ingested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eaimq_dlq_ingested_total",
			Help: "Dead letters written into the store (each batch acked after its commit).",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eaimq_dlq_ingest_duplicates_total",
			Help: "Dead letters acked without a row: that copy was in the store already (redelivered, or dead-lettered twice).",
		}),
	}
	m.reg.MustRegister(m.rows, m.maxRows, m.stopped, m.ingested, m.duplicates)
	m.stopped.WithLabelValues(StoppedFull)
	m.stopped.WithLabelValues(StoppedStore)
	return m
}

// Serve listens on addr and serves /metrics until ctx ends; the listen
// happens before it returns, so that a port in use is an error at start.
func (m *Ingest) Serve(ctx context.Context, addr string) (listening string, err error) {
	h, err := Handler(m.reg, "")
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	listening, stop, err := Listen(ctx, "-metrics-addr", addr, mux)
	if err != nil {
		return "", err
	}
	context.AfterFunc(ctx, stop)
	return listening, nil
}

// The ingester's reports; each is a no-op on nil metrics (no
// -metrics-addr). Counted: the rows in the table and the bound; Batch:
// a batch's new rows of those taken; Stop: ingestion stopped (on) or
// going again, and why.

func (m *Ingest) Counted(rows, maxRows int64) {
	if m != nil {
		m.rows.Set(float64(rows))
		m.maxRows.Set(float64(maxRows))
	}
}

func (m *Ingest) Batch(added, taken int) {
	if m != nil {
		m.ingested.Add(float64(added))
		m.duplicates.Add(float64(taken - added))
	}
}

func (m *Ingest) Stop(reason string, on bool) {
	if m != nil {
		v := 0.0
		if on {
			v = 1
		}
		m.stopped.WithLabelValues(reason).Set(v)
	}
}
