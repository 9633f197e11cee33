// Package metrics is the consumer's Prometheus metrics and health endpoints
// (--metrics-addr): what an operator watches while claims move.
//
// The metrics live on a registry of their own, not the library's global
// default, so that two consumers in one test process never share counters,
// and nothing a dependency registers leaks into the scrape. Every method is
// safe on a nil *Consumer and does nothing: without --metrics-addr the
// consumer pays a nil check per event.
//
// What costs nothing on a claim's way is read at scrape time instead of
// being kept up to date per claim: readiness, the partner's failures in a
// row and the deliveries held unacked are functions of the running
// consumer (Live), called when Prometheus asks.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"eaimq/internal/claim"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
)

// Consumer is the consumer's metrics.
type Consumer struct {
	reg        *prometheus.Registry
	live       Live
	received   prometheus.Counter
	claims     *prometheus.CounterVec
	calls      *prometheus.CounterVec
	latency    prometheus.Histogram
	dedup      prometheus.Counter
	inFlight   prometheus.Gauge
	retries    *prometheus.CounterVec
	paused     prometheus.Gauge
	pausedSec  prometheus.Counter
	commit     prometheus.Histogram
	depth      *prometheus.GaugeVec
	reconnects prometheus.Counter
}

// Live is what the metrics read from the running consumer at each scrape.
type Live struct {
	// Ready is /readyz and eaimq_ready.
	Ready Ready
	// Failures is the partner calls in a row that failed.
	Failures func() int64
	// Unacked is the deliveries of claim.in this consumer holds unacked.
	Unacked func() int64
	// VHost labels the queue metrics: several consumers, one vhost each,
	// on one Prometheus.
	VHost string
}

// Ready says whether the consumer can do its job now; why names what is
// not right when it cannot.
type Ready func() (ok bool, why string)

// Classes are the partner call classes: the status class, or "error" when
// there was no answer (refused, reset, timeout).
var Classes = []string{"1xx", "2xx", "3xx", "4xx", "5xx", "error"}

// New makes the metrics on a private registry; live's functions must be
// safe to call from the scraping goroutine at any time.
func New(live Live) *Consumer {
	m := &Consumer{
		reg:  prometheus.NewRegistry(),
		live: live,
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
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eaimq_queue_messages_ready",
			Help: "Messages ready in claim.in, claim.dead and each delay queue of --retry-delays (claims waiting for their retry), as the broker answered a passive declare (every few seconds; absent while the consumer has no connection).",
		}, []string{"queue", "vhost"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eaimq_broker_reconnects_total",
			Help: "Broker connections opened again after one was lost.",
		}),
	}
	m.reg.MustRegister(m.received, m.claims, m.calls, m.latency, m.dedup, m.inFlight, m.retries,
		m.paused, m.pausedSec, m.commit, m.depth, m.reconnects,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.scraped()...)
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

// scraped is the metrics read from the consumer when Prometheus asks, and
// the build's: nothing on a claim's way keeps them.
func (m *Consumer) scraped() []prometheus.Collector {
	b := cli.ReadBuild()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "eaimq_build_info",
		Help: "1, labelled with the build this consumer runs (as -version says it).",
		ConstLabels: prometheus.Labels{"program": "consumer", "version": b.Version, "revision": b.Revision,
			"modified": strconv.FormatBool(b.Modified), "goversion": b.GoVersion},
	})
	build.Set(1)
	return []prometheus.Collector{
		build,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "eaimq_ready",
			Help: "1 while /readyz answers 200, 0 while it answers 503 (GET /readyz says why).",
		}, func() float64 {
			if m.live.Ready == nil {
				return 0
			}
			ok, _ := m.live.Ready()
			return b2f(ok)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "eaimq_partner_consecutive_failures",
			Help: "Partner calls in a row that failed (no answer, 5xx, 408, 429, or an answer that is not one); 0 after a call that did not.",
		}, liveInt(m.live.Failures)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "eaimq_queue_messages_unacked",
			Help:        "Deliveries of claim.in this consumer holds unacked now: taken from the broker, not yet acked, requeued or rejected (at most --prefetch). Sum over the consumers of a vhost.",
			ConstLabels: prometheus.Labels{"queue": topo.Queue, "vhost": m.live.VHost},
		}, liveInt(m.live.Unacked)),
	}
}

func liveInt(f func() int64) func() float64 {
	return func() float64 {
		if f == nil {
			return 0
		}
		return float64(f())
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
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

// Reconnected counts one broker connection opened again.
func (m *Consumer) Reconnected() {
	if m != nil {
		m.reconnects.Inc()
	}
}

// QueueReady sets the messages ready in queue, as the broker said.
func (m *Consumer) QueueReady(queue string, n int) {
	if m != nil {
		m.depth.WithLabelValues(queue, m.live.VHost).Set(float64(n))
	}
}

// QueueUnknown removes queue's depth: the consumer cannot see it now (no
// connection, or the queue is gone). A last value kept would be a stale
// one, and the backlog alerts would read it as current.
func (m *Consumer) QueueUnknown(queue string) {
	if m != nil {
		m.depth.DeleteLabelValues(queue, m.live.VHost)
	}
}
