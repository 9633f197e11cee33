package sqlite

import "testing"

// TestGroupCommit: every request is handed over exactly once, in order, no batch
// holds more than max, and requests that wait together go together.
func TestGroupCommit(t *testing.T) {
	reqs := make(chan int, 100)
	for i := range 25 {
		reqs <- i
	}
	close(reqs)
	var got []int
	var sizes []int
	groupCommit(reqs, 10, func(b []int) {
		sizes = append(sizes, len(b))
		got = append(got, b...)
	})
	if len(got) != 25 {
		t.Fatalf("%d requests handed over, want 25", len(got))
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("out of order: %v", got)
		}
	}
	if len(sizes) != 3 || sizes[0] != 10 || sizes[1] != 10 || sizes[2] != 5 {
		t.Errorf("batches %v, want 10, 10, 5", sizes)
	}

}
