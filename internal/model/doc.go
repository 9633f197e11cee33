// Package model is an explicit-state model checker of the relay's
// protocol. It explores every interleaving of deliveries, the consumers'
// per-delivery steps and faults (crashes, lost acks, closed channels,
// lost confirms, store failures, lost answers, the quorum delivery limit,
// expired leases), breadth first, and checks the invariants of
// docs/safety.md in every state it reaches; the first counterexample is a
// shortest trace.
//
// It calls internal/claim's decision functions (Rules: Production), not a
// copy of them, so that the model checks the rules the relay runs. A
// mutant (Mutants) wraps one of them to show that the invariants would
// catch it going wrong. docs/model.md says what is modelled, what is left
// out, the figures, and what the checker found.
package model
