package relay

import (
	"strings"
	"testing"

	"eaimq/internal/claim"
	"eaimq/internal/partner"
)

// TestPartnerHealth: k calls in a row that failed make the consumer
// unready, naming the last failure; a 201 or a rejection ends the run of
// failures; every kind of answer claim.Decide treats as a failure counts (no
// answer, 5xx, 429, 3xx, a 2xx not accepted); k 0 never makes it unready.
func TestPartnerHealth(t *testing.T) {
	accept := AcceptSet{201}
	call := func(h *partnerHealth, status int, excerpt string) {
		h.note(claim.Decide(status, accept, false, 0), partner.Answer{Status: status, Excerpt: excerpt})
	}
	var h partnerHealth
	for i, status := range []int{0, 503, 429, 302, 200} {
		if bad, _ := h.unready(5); bad {
			t.Fatalf("unready after %d failures, k 5", i)
		}
		call(&h, status, "busy")
	}
	bad, why := h.unready(5)
	if !bad || h.failures() != 5 || !strings.Contains(why, "failed the last 5 calls in a row (the last: HTTP 200 busy)") {
		t.Errorf("after 5 failures: %v %q (%d)", bad, why, h.failures())
	}
	if bad, _ := h.unready(0); bad {
		t.Error("k 0 made it unready")
	}
	call(&h, 422, "documents missing")
	if bad, _ := h.unready(1); bad || h.failures() != 0 {
		t.Errorf("a rejection did not end the failures: %d", h.failures())
	}
	call(&h, 0, "connection refused")
	if bad, why := h.unready(1); !bad || !strings.Contains(why, "(the last: connection refused)") {
		t.Errorf("one failure, k 1: %v %q", bad, why)
	}
	call(&h, 201, "")
	if bad, _ := h.unready(1); bad || h.failures() != 0 {
		t.Errorf("a 201 did not end the failures: %d", h.failures())
	}
}
