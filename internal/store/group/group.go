// Package group is the loop of a store's writer goroutine: it takes every
// request that is waiting, up to a bound, and hands them over together,
// so that one transaction (and one flush) carries the records of many
// (group commit). Both backends' writers run it.
package group

// Commit calls commit with each batch of the requests that arrive on reqs,
// at most max at a time: the first one it waits for, then every one that
// is already waiting. It returns when reqs is closed and drained.
func Commit[T any](reqs <-chan T, max int, commit func([]T)) {
	batch := make([]T, 0, max)
	for r := range reqs {
		batch = append(batch[:0], r)
	more:
		for len(batch) < max {
			select {
			case r, ok := <-reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		commit(batch)
	}
}
