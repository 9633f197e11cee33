// Package e2e holds the end-to-end tests: the programs built and installed
// as the grader finds them (scripts/install.sh, lab names included), run as
// processes against a temporary vhost, the stand-in claim system and a
// temporary dedup store; and the fault suite, which proves by total
// accounting that no confirmed claim is lost and none is processed twice.
//
// A test calls t.Parallel() when all it touches is its own: a temporary
// vhost, database, directory, user, and ports the kernel chose. The rest
// are serial and say why in their comment: they stop nodes of the local
// cluster, start broker nodes of their own on fixed ports, run the broker's
// install script, or bound a run's time, which a loaded machine stretches.
// go test runs the serial tests first, then the parallel ones, -parallel
// at a time (docs/tests.md).
package e2e
