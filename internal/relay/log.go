package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/partner"
)

// claimLog writes the one line per claim. It builds the line only when the
// level is enabled: at thousands of claims a second, a logger clone per
// delivery shows up in the profile.
type claimLog struct {
	l           *slog.Logger
	id, claimID string
	traceID     string // the message's W3C trace id, when it carries one
	redelivered bool
}

func (c claimLog) log(level slog.Level, msg string, out claim.Outcome, detail string, a partner.Answer, extra ...any) {
	if !c.l.Enabled(context.Background(), level) {
		return
	}
	// Fields from a message are clipped: a 1 MiB claimId must not make a
	// 1 MiB log line. (slog quotes and escapes what it prints.)
	attrs := []any{"message_id", clip(c.id), "claim_id", clip(c.claimID), "redelivered", c.redelivered,
		"outcome", out.Word(), "reason", out.Reason.String()}
	if c.traceID != "" {
		attrs = append(attrs, "trace_id", c.traceID)
	}
	if a.Status != 0 || a.Err != nil {
		attrs = append(attrs, "status", a.Status, "latency", a.Latency.Round(time.Millisecond))
	}
	if detail != "" && out.Reason != claim.Delivered && out.Reason != claim.Duplicate {
		attrs = append(attrs, "detail", detail)
	}
	if a.Status != 201 && a.Excerpt != "" {
		attrs = append(attrs, "answer", a.Excerpt)
	}
	c.l.Log(context.Background(), level, msg, append(attrs, extra...)...)
}

func (c claimLog) Error(msg string, args ...any) {
	attrs := []any{"message_id", clip(c.id), "claim_id", clip(c.claimID)}
	if c.traceID != "" {
		attrs = append(attrs, "trace_id", c.traceID)
	}
	c.l.Error(msg, append(attrs, args...)...)
}

// clip shortens a field taken from a message for a log line.
func clip(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return s[:max] + fmt.Sprintf("…(%d bytes)", len(s))
}
