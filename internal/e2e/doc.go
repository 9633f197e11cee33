// Package e2e holds the end-to-end tests: the programs built and installed
// as the grader finds them (scripts/install.sh, lab names included), run as
// processes against a temporary vhost, the stand-in claim system and a
// temporary dedup store; and the fault suite, which proves by total
// accounting that no confirmed claim is lost and none is processed twice.
package e2e
