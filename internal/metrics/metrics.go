// Package metrics is the consumer's Prometheus metrics and health endpoints
// (--metrics-addr): what an operator watches while claims move.
//
// The metrics live on a registry of their own, not the library's global
// default, so that two consumers in one test process never share counters,
// and nothing a dependency registers leaks into the scrape. Every method is
// safe on a nil *Consumer and does nothing: without --metrics-addr the
// consumer pays a nil check per event.
package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"eaimq/internal/claim"
)

// Consumer is the consumer's metrics.
type Consumer struct {
	reg       *prometheus.Registry
	received  prometheus.Counter
	claims    *prometheus.CounterVec
	calls     *prometheus.CounterVec
	latency   prometheus.Histogram
	dedup     prometheus.Counter
	inFlight  prometheus.Gauge
	retries   *prometheus.CounterVec
	paused    prometheus.Gauge
	pausedSec prometheus.Counter
	commit    prometheus.Histogram
}

// Classes are the partner call classes: the status class, or "error" when
// there was no answer (refused, reset, timeout).
var Classes = []string{"1xx", "2xx", "3xx", "4xx", "5xx", "error"}

// New makes the metrics on a private registry.
func New() *Consumer {
	m := &Consumer{
		reg: prometheus.NewRegistry(),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eaimq_deliveries_received_total",
			Help: "Deliveries taken from claim.in (redeliveries and retries included).",
		}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eaimq_claims_total",
			Help: "Deliveries settled, by outcome (delivered, duplicate, requeued, delayed, dead-lettered) and reason: the consumer's summary, live.",
		}, []string{"outcome", "reason"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eaimq_partner_requests_total",
			Help: "Calls to the claim system by status class (error: no answer).",
		}, []string{"class"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "eaimq_partner_request_duration_seconds",
			Help:    "Time from sending a claim to the claim system's answer (or to giving up).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		dedup: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eaimq_dedup_hits_total",
			Help: "Deliveries whose claim was on record as delivered: acked without a call.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eaimq_claims_in_flight",
			Help: "Deliveries a worker holds now (at most --prefetch).",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eaimq_retries_scheduled_total",
			Help: "Claims sent to a delay queue (--retry-delays), by delay queue.",
		}, []string{"queue"}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eaimq_paused",
			Help: "1 while the consumer is paused because the claim system is down (--pause-when-down).",
		}),
		pausedSec: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eaimq_paused_seconds_total",
			Help: "Time spent paused because the claim system was down.",
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "eaimq_store_commit_duration_seconds",
			Help:    "Time to make an outcome durable in the dedup store (the commit before each ack).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
	}
	m.reg.MustRegister(m.received, m.claims, m.calls, m.latency, m.dedup, m.inFlight, m.retries,
		m.paused, m.pausedSec, m.commit,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every outcome's series exists from the start (at 0), so that rate()
	// and increase() see the first claim of each.
	for _, o := range claim.Outcomes {
		m.claims.WithLabelValues(o.Word(), o.Reason.String())
	}
	for _, c := range Classes {
		m.calls.WithLabelValues(c)
	}
	return m
}

// Received counts one delivery taken.
func (m *Consumer) Received() {
	if m != nil {
		m.received.Inc()
	}
}

// Settled counts one delivery acted on with outcome o.
func (m *Consumer) Settled(o claim.Outcome) {
	if m == nil {
		return
	}
	m.claims.WithLabelValues(o.Word(), o.Reason.String()).Inc()
	if o == claim.OutDuplicate {
		m.dedup.Inc()
	}
}

// Call counts one partner call: status 0 means no answer.
func (m *Consumer) Call(status int, d time.Duration) {
	if m == nil {
		return
	}
	class := "error"
	if status >= 100 && status < 600 {
		class = strconv.Itoa(status/100) + "xx"
	}
	m.calls.WithLabelValues(class).Inc()
	m.latency.Observe(d.Seconds())
}

// InFlight moves the in-flight gauge by delta.
func (m *Consumer) InFlight(delta float64) {
	if m != nil {
		m.inFlight.Add(delta)
	}
}

// RetryScheduled counts one claim sent to delay queue q.
func (m *Consumer) RetryScheduled(q string) {
	if m != nil {
		m.retries.WithLabelValues(q).Inc()
	}
}

// Paused sets the paused gauge; Resumed clears it and adds the pause.
func (m *Consumer) Paused() {
	if m != nil {
		m.paused.Set(1)
	}
}

func (m *Consumer) Resumed(d time.Duration) {
	if m != nil {
		m.paused.Set(0)
		m.pausedSec.Add(d.Seconds())
	}
}

// Commit observes one store commit.
func (m *Consumer) Commit(d time.Duration) {
	if m != nil {
		m.commit.Observe(d.Seconds())
	}
}

// Ready says whether the consumer can do its job now; why names what is
// not right when it cannot.
type Ready func() (ok bool, why string)

// Serve listens on addr and serves /metrics, /healthz (the process
// answers) and /readyz (ready says so: 200, else 503 with the reason),
// until ctx ends. The listen happens before it returns, so that a port in
// use is an error at start, not a line in the log later.
// It returns the address it listens on (port 0 picks one).
func (m *Consumer) Serve(ctx context.Context, addr string, ready Ready) (listening string, stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l) // ends with ErrServerClosed at stop
	}()
	return l.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
	}, nil
}
