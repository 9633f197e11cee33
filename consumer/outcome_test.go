package main

import "testing"

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		status        int
		redelivered   bool
		priorFailures int
		want          action
	}{
		{201, false, 0, ack},
		{200, true, 1, ack},
		{204, false, 0, ack},
		{422, false, 0, deadLetter},
		{400, false, 0, deadLetter},
		{404, true, 0, deadLetter},
		{503, false, 0, requeue},
		{503, true, 0, requeue},    // redelivered after a crash: not failed yet
		{503, false, 3, requeue},   // a fresh copy: its first delivery
		{503, true, 1, deadLetter}, // failed, requeued, failed again
		{0, false, 0, requeue},     // no answer (refused, reset, timeout)
		{0, true, 1, deadLetter},
		{500, true, 1, deadLetter},
		{408, false, 0, requeue},
		{429, true, 1, deadLetter},
		{302, false, 0, requeue}, // unexpected: the transient rule, never a loop
		{302, true, 1, deadLetter},
		{100, true, 1, deadLetter},
	} {
		got, _ := decide(classify(tc.status), tc.redelivered, tc.priorFailures)
		if got != tc.want {
			t.Errorf("status %d redelivered=%v prior=%d: %v, want %v", tc.status, tc.redelivered, tc.priorFailures, got, tc.want)
		}
	}
}
