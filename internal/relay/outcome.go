package relay

import "eaimq/internal/claim"

// AcceptSet is the set of statuses that mean "delivered" (claim.AcceptSet,
// where the decision that reads it lives: claim.Decide).
type AcceptSet = claim.AcceptSet
