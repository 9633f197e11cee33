package relay

import (
	"bytes"
	"testing"
	"time"

	"eaimq/internal/claim"
)

// TestSummaryCountsEveryOutcome: each outcome of claim.Outcomes, counted,
// shows in the summary; the dead-lettered ones add up to DeadLettered.
func TestSummaryCountsEveryOutcome(t *testing.T) {
	var s stats
	for i, o := range claim.Outcomes {
		for range i + 1 {
			s.count(o)
		}
	}
	s.count(claim.Outcome{}) // not an outcome: counted nowhere
	sum := s.summary(0)
	want := Summary{Delivered: 1, Duplicates: 2, Requeued: 3, Delayed: 4, Rejected: 5, FailedTwice: 6, NoID: 7,
		Unexpected: 8, Unsendable: 9, Superseded: 10, DeadLettered: 5 + 6 + 7 + 8 + 9}
	if sum != want {
		t.Errorf("summary %+v, want %+v", sum, want)
	}
}

// TestSummaryOutput holds the summary's line and its JSON to their bytes:
// scripts parse both.
func TestSummaryOutput(t *testing.T) {
	lab := Summary{Received: 8, Delivered: 3, Duplicates: 1, Requeued: 1, DeadLettered: 3, Rejected: 2, FailedTwice: 1,
		Seconds: (1234 * time.Millisecond).Seconds()}
	full := lab
	full.Delayed, full.PausedSeconds, full.Pauses, full.PauseReason = 2, 1.5, 1, "3 calls in a row without an answer"
	for _, tc := range []struct {
		s          Summary
		text, json string
	}{
		{lab,
			"consumer: 8 received: 3 delivered, 1 duplicates skipped, 1 requeued, 3 dead-lettered (2 rejected by the claim system, 1 failed twice, 0 without id, 0 unexpected status, 0 unsendable), 0 errors; 1.2s\n",
			`{"received":8,"delivered":3,"duplicates":1,"requeued":1,"dead_lettered":3,"rejected":2,"failed_twice":1,"no_id":0,"unexpected_status":0,"unsendable":0,"errors":0,"seconds":1.234}` + "\n"},
		{full,
			"consumer: 8 received: 3 delivered, 1 duplicates skipped, 1 requeued, 2 sent to delay queues, 3 dead-lettered (2 rejected by the claim system, 1 failed twice, 0 without id, 0 unexpected status, 0 unsendable), 0 errors; 1.2s; paused 1.5s in 1 pause(s), the claim system down (3 calls in a row without an answer)\n",
			`{"received":8,"delivered":3,"duplicates":1,"requeued":1,"dead_lettered":3,"rejected":2,"failed_twice":1,"no_id":0,"unexpected_status":0,"unsendable":0,"errors":0,"seconds":1.234,"delayed":2,"paused_seconds":1.5,"pauses":1,"pause_reason":"3 calls in a row without an answer"}` + "\n"},
	} {
		var text, js bytes.Buffer
		tc.s.writeText(&text)
		tc.s.writeJSON(&js)
		if text.String() != tc.text {
			t.Errorf("text:\n got %q\nwant %q", text.String(), tc.text)
		}
		if js.String() != tc.json {
			t.Errorf("JSON:\n got %s\nwant %s", js.String(), tc.json)
		}
	}
}
