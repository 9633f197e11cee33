package relay

import (
	"fmt"
	"sync/atomic"

	"eaimq/internal/claim"
	"eaimq/internal/partner"
)

// partnerHealth counts the partner calls in a row that failed, so that
// /readyz says so (after Config.UnreadyAfter of them) with or without
// --pause-when-down, and eaimq_partner_consecutive_failures shows it.
// Without it a consumer whose partner is down answers "ready" while every
// claim it takes burns its retry and goes to the DLQ.
//
// A failure is what a claim cannot get past: no answer, an answer claim.Decide
// treats as transient (5xx, 408, 429, 1xx, 3xx), and another 2xx (a
// proxy's page, not the claim system). A 201 and a rejection (422, other
// 4xx) are the claim system doing its job: either resets the count.
type partnerHealth struct {
	inRow atomic.Int64
	last  atomic.Pointer[string] // the latest failure, as /readyz says it
}

// note counts one call: out is claim.Decide's outcome of its answer a, before
// a retry plan turns it into a delay. The common case (a success after a
// success) only reads the counter, so that concurrent workers do not
// contend on one cache line per claim.
func (h *partnerHealth) note(out claim.Outcome, a partner.Answer) {
	if out == claim.OutDelivered || out == claim.OutRejected {
		if h.inRow.Load() != 0 {
			h.inRow.Store(0)
		}
		return
	}
	why := a.Excerpt
	if a.Status != 0 {
		why = fmt.Sprintf("HTTP %d %s", a.Status, clip(a.Excerpt))
	}
	h.last.Store(&why)
	h.inRow.Add(1)
}

// failures is the calls in a row that failed.
func (h *partnerHealth) failures() int64 { return h.inRow.Load() }

// unready says whether k calls in a row or more failed (k 0: never), and
// how /readyz puts it.
func (h *partnerHealth) unready(k int) (bool, string) {
	n := h.inRow.Load()
	if k <= 0 || n < int64(k) {
		return false, ""
	}
	last := ""
	if p := h.last.Load(); p != nil {
		last = *p
	}
	return true, fmt.Sprintf("the claim system failed the last %d calls in a row (the last: %s); "+
		"ready again after a call that does not fail", n, last)
}
