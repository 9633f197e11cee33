package nodestatus

import (
	"context"
	"fmt"
	"io"
	"strings"

	"eaimq/internal/broker"
	"eaimq/internal/rabbitctl"
)

// Summary is what brokerstatus prints: as text by default, as this JSON
// object with -json.
type Summary struct {
	Node        string           `json:"node"`
	Version     string           `json:"version"`
	Watermark   WatermarkSummary `json:"watermark"`
	Alarms      []Alarm          `json:"alarms"`
	Saved       *string          `json:"saved"` // null with -o -
	VHost       string           `json:"vhost"`
	Queues      []QueueSummary   `json:"queues"`                 // null when not listed
	QueuesError string           `json:"queues_error,omitempty"` // why not
}

// WatermarkSummary is the watermark setting and the verdict on it.
type WatermarkSummary struct {
	Kind        string   `json:"kind"`               // "absolute" or "relative"
	Bytes       *int64   `json:"bytes,omitempty"`    // the absolute setting
	Fraction    *float64 `json:"fraction,omitempty"` // the relative setting
	LimitBytes  int64    `json:"limit_bytes"`        // what the node computed it to
	WantedBytes int64    `json:"wanted_bytes"`
	OK          bool     `json:"ok"`
	Problem     string   `json:"problem,omitempty"`

	text string // the setting as the text summary shows it
}

// QueueSummary is one queue of the vhost and its counts.
type QueueSummary struct {
	Name     string `json:"name"`
	Messages int    `json:"messages"`
	Unacked  int    `json:"unacked"`
}

func newSummary(node string, st Status, want int64, ok bool, why string) *Summary {
	w := st.Watermark
	wj := WatermarkSummary{LimitBytes: w.LimitBytes, WantedBytes: want, OK: ok, Problem: why, text: w.String()}
	if w.Absolute {
		wj.Kind, wj.Bytes = "absolute", &w.Bytes
	} else {
		wj.Kind, wj.Fraction = "relative", &w.Fraction
	}
	alarms := st.Alarms
	if alarms == nil {
		alarms = []Alarm{}
	}
	return &Summary{Node: node, Version: st.Version, Watermark: wj, Alarms: alarms}
}

// listQueues fills in the queues of the vhost in the AMQP URL raw. They
// are information, so a failure here is said in the summary, not an error.
func (s *Summary) listQueues(ctx context.Context, ctl rabbitctl.Ctl, raw string) {
	vhost, err := broker.VHost(raw)
	if err != nil {
		s.QueuesError = err.Error()
		return
	}
	s.VHost = vhost
	rows, err := ctl.ListQueues(ctx, vhost)
	if err != nil {
		s.QueuesError = err.Error()
		return
	}
	s.Queues = make([]QueueSummary, 0, len(rows))
	for _, r := range rows {
		s.Queues = append(s.Queues, QueueSummary{Name: r.Name, Messages: r.Messages, Unacked: r.Unacked})
	}
}

func (s *Summary) print(w io.Writer) {
	fmt.Fprintf(w, "node:      %s\n", s.Node)
	fmt.Fprintf(w, "version:   RabbitMQ %s\n", s.Version)
	verdict := "ok"
	if !s.Watermark.OK {
		verdict = "WRONG"
	}
	fmt.Fprintf(w, "watermark: %s (%s)\n", s.Watermark.text, verdict)
	if len(s.Alarms) == 0 {
		fmt.Fprintf(w, "alarms:    none\n")
	} else {
		as := make([]string, len(s.Alarms))
		for i, a := range s.Alarms {
			as[i] = a.String()
		}
		fmt.Fprintf(w, "alarms:    %s (publishers are blocked while an alarm is on)\n", strings.Join(as, "; "))
	}
	if s.Saved != nil {
		fmt.Fprintf(w, "saved:     %s\n", *s.Saved)
	}
	if s.Queues == nil {
		fmt.Fprintf(w, "queues:    not listed: %s\n", s.QueuesError)
		return
	}
	fmt.Fprintf(w, "queues in vhost %q:\n", s.VHost)
	if len(s.Queues) == 0 {
		fmt.Fprintf(w, "  (none; run topology)\n")
		return
	}
	fmt.Fprintf(w, "  %-24s %10s %10s\n", "name", "messages", "unacked")
	for _, r := range s.Queues {
		fmt.Fprintf(w, "  %-24s %10d %10d\n", r.Name, r.Messages, r.Unacked)
	}
}
