package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/confirm"
	"eaimq/internal/fail"
)

// TestVerdictOrder: of the reasons that apply to one run, the error is the
// first in the manual's order, and nacked and returned carry no class (the
// program gives them their codes).
func TestVerdictOrder(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	timeout := fmt.Errorf("%w (10s)", confirm.ErrTimeout)
	died := errors.New("connection closed")
	every := Summary{Sent: 1, Returned: 1, Nacked: 1, Invalid: 1, Changed: 1, Unconfirmed: 1, NotSent: 1}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		s       Summary
		sendErr error
		class   fail.Class
		is      error
		want    string
	}{
		{"signal, claims in doubt", canceled, every, timeout, fail.TempFail, nil, "interrupted: 1 claim(s) published but not confirmed"},
		{"signal", canceled, Summary{Sent: 2, NotSent: 3, Nacked: 1}, context.Canceled, fail.Interrupted, nil, "interrupted: 2 claim(s) sent and confirmed, 3 not published"},
		{"no confirm in time", live, every, timeout, fail.TempFail, confirm.ErrTimeout, "no confirm from the broker in time (10s): 1 claim(s) may or may not be queued"},
		{"connection died", live, every, died, fail.Unavailable, died, "connection closed"},
		{"nacked", live, Summary{Nacked: 2, Returned: 1, Invalid: 1}, nil, fail.None, ErrNacked, "2 claim(s) nacked by the broker"},
		{"returned", live, Summary{Returned: 3, Changed: 1}, nil, fail.None, ErrReturned, "3 claim(s) returned as unroutable"},
		{"invalid or changed", live, Summary{Sent: 1, Invalid: 1, Changed: 2}, nil, fail.Data, nil, "1 file(s) were not valid claims and 2 changed before sending"},
	} {
		err := verdict(tc.ctx, &tc.s, tc.sendErr, &dialed{blocked: make(chan amqp.Blocking)})
		if err == nil || fail.Of(err) != tc.class || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v (class %v); want class %v, %q", tc.name, err, fail.Of(err), tc.class, tc.want)
		}
	}
	if err := verdict(live, &Summary{Sent: 3}, nil, &dialed{}); err != nil {
		t.Errorf("all sent: %v", err)
	}
}

// TestVerdictSaysTheBrokerBlocks: a late confirm from a broker that blocks
// publishers says so, and why.
func TestVerdictSaysTheBrokerBlocks(t *testing.T) {
	d := &dialed{blocked: make(chan amqp.Blocking, 2)}
	d.blocked <- amqp.Blocking{Active: true, Reason: "low on memory"}
	err := verdict(context.Background(), &Summary{Unconfirmed: 1}, confirm.ErrTimeout, d)
	if fail.Of(err) != fail.TempFail || !strings.Contains(err.Error(), "the broker is blocking publishers (low on memory)") {
		t.Errorf("%v", err)
	}
}

// TestRunRefusesBeforeSending: a batch with an invalid file is refused as a
// whole (Data), every file accounted for, and nothing waits for a broker.
func TestRunRefusesBeforeSending(t *testing.T) {
	dir := t.TempDir()
	good, bad := writeClaim(t, dir, "good.json", `{"guid":"g"}`), writeClaim(t, dir, "bad.json", `not json`)
	var stderr strings.Builder
	cfg := Config{Files: []string{good, bad}, Window: 1, Timeout: time.Minute, MaxBytes: 100, Progress: ProgressNever,
		URL: "amqp://guest:guest@127.0.0.1:1/", Getenv: func(string) string { return "" }}
	s, err := Run(context.Background(), cfg, io.MultiReader(), &stderr)
	if fail.Of(err) != fail.Data || s.Invalid != 1 || s.NotSent != 1 || len(s.Failures) != 2 || s.Seconds < 0 {
		t.Errorf("%v: %+v", err, s)
	}
	if !strings.HasPrefix(stderr.String(), "publish: "+bad+": ") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// TestBrokerMax: the broker's refusal of a message above its
// max_message_size (a 406 that closes the channel) is told from other
// errors, with its limit.
func TestBrokerMax(t *testing.T) {
	refusal := &amqp.Error{Code: 406, Reason: "PRECONDITION_FAILED - message size 17825847 is larger than configured max size 16777216"}
	for _, tc := range []struct {
		err  error
		want int64
	}{
		{refusal, 16777216},
		{fmt.Errorf("the broker closed the channel: %w", refusal), 16777216},
		{&amqp.Error{Code: 406, Reason: "PRECONDITION_FAILED - inequivalent arg"}, 0},
		{&amqp.Error{Code: 504, Reason: "channel/connection is not open"}, 0},
		{nil, 0},
	} {
		if got := brokerMax(tc.err); got != tc.want {
			t.Errorf("brokerMax(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
