package model

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var workerRef = regexp.MustCompile(`\{w[0-9]+\}`)

// Result is what a search found.
type Result struct {
	States   int
	Longest  int  // the longest of the shortest traces to a state: the search's depth
	Fixpoint bool // every reachable state was explored
	Why      string
	// Fired is how often each fault's transition was taken.
	Fired [NumFaults]int
	// Violation is the first invariant broken ("" for none), and Trace
	// the shortest trace that breaks it, one line a step.
	Violation string
	Trace     []string
	// Duplicates counts the calls made after a claim's final answer, by
	// the windows its trace went through (names joined with "+").
	Duplicates map[string]int
	// Quiescent is the number of states where all work is done.
	Quiescent int

	path []label // the trace's transitions, for a replay
}

// Summary is the one line both the test and scripts/model.sh print.
func (r Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model: %d states, longest trace %d, ", r.States, r.Longest)
	if r.Fixpoint {
		b.WriteString("fixpoint reached")
	} else {
		b.WriteString("no fixpoint: " + r.Why)
	}
	b.WriteString(", faults fired:")
	for f := range NumFaults {
		sep := ","
		if f == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s=%d", sep, f, r.Fired[f])
	}
	return b.String()
}

// Check explores every state cfg can reach, breadth first, and stops at
// the first broken invariant: breadth first, its trace is a shortest one.
func Check(cfg Config) Result {
	k := newChecker(cfg)
	nw, nc := cfg.Consumers, len(cfg.Answers)
	init := k.initial()
	seen := map[string]int32{}
	var keys []string
	var parent []int32
	var labels []label
	var depth []uint16
	var buf []byte
	push := func(s *state, p int32, l label, d uint16) {
		buf = s.appendKey(buf[:0])
		if _, ok := seen[string(buf)]; ok {
			return
		}
		key := string(buf)
		seen[key] = int32(len(keys))
		keys = append(keys, key)
		parent = append(parent, p)
		labels = append(labels, l)
		depth = append(depth, d)
	}
	push(init, -1, label{}, 0)
	res := Result{Duplicates: map[string]int{}}
	fail := func(at int32, last *label, why string) Result {
		res.Why = "an invariant broke"
		res.path = pathTo(at, parent, labels, last)
		res.Trace, res.Violation = k.trace(init, res.path, last != nil, why)
		res.States = len(keys)
		res.Longest = int(depth[len(depth)-1])
		return res
	}
	for i := 0; i < len(keys); i++ {
		if cfg.MaxStates > 0 && len(keys) >= cfg.MaxStates {
			res.Why = fmt.Sprintf("stopped at %d states (MaxStates)", cfg.MaxStates)
			res.States, res.Longest = len(keys), int(depth[len(depth)-1])
			return res
		}
		s := decode(keys[i], nw, nc)
		es := k.succ(s)
		progress := false
		for _, e := range es {
			if e.l.kind >= kFault {
				res.Fired[e.l.kind-kFault]++
			} else {
				progress = true
			}
			if e.bad != "" {
				return fail(int32(i), &e.l, e.bad)
			}
			if e.l.kind == kCall || e.l.kind == kFault+uint8(Timeout) {
				k.countDuplicate(s, e, &res)
			}
			push(e.s, int32(i), e.l, depth[i]+1)
		}
		if quiet(s) {
			res.Quiescent++
			if why := k.atQuiescence(s); why != "" {
				return fail(int32(i), nil, why)
			}
		} else if !progress {
			return fail(int32(i), nil, "stuck: work is left, and nothing but a fault can move it ("+k.pending(s)+")")
		}
	}
	res.States, res.Longest, res.Fixpoint = len(keys), int(depth[len(depth)-1]), true
	return res
}

// countDuplicate notes a call after its claim's final answer, and the
// windows that allowed it.
func (k *checker) countDuplicate(s *state, e edge, res *Result) {
	ci := -1
	for wi, w := range s.workers {
		if uint8(wi) == e.l.w && w.pc == pcCall {
			ci = int(w.m.c)
		}
	}
	if ci < 0 || !s.claims[ci].final {
		return
	}
	var names []string
	for w := range numWindows {
		if e.s.claims[ci].winMask&(1<<w) != 0 {
			names = append(names, windowNames[w])
		}
	}
	res.Duplicates[strings.Join(names, "+")]++
}

// quiet: no copy left on the broker but in claim.dead, no worker busy.
func quiet(s *state) bool {
	if len(s.ready) > 0 || len(s.delay) > 0 {
		return false
	}
	for _, w := range s.workers {
		if w.pc != pcIdle {
			return false
		}
	}
	return true
}

// atQuiescence checks what must hold once all work is done: every claim
// accepted by the partner or in claim.dead, none in flight.
func (k *checker) atQuiescence(s *state) string {
	for ci, c := range s.claims {
		if !c.accepted && c.dead+c.limitDead == 0 {
			return fmt.Sprintf("%s is lost: neither accepted by the partner nor in claim.dead", claimName(uint8(ci)))
		}
	}
	return ""
}

func (k *checker) pending(s *state) string {
	var p []string
	for wi, w := range s.workers {
		if w.pc != pcIdle {
			p = append(p, fmt.Sprintf("w%d at %s with %s", wi+1, pcNames[w.pc], w.m))
		}
	}
	if len(s.ready) > 0 {
		p = append(p, fmt.Sprintf("%d ready", len(s.ready)))
	}
	return strings.Join(p, "; ")
}

// trace tells the shortest trace to state at (and the transition last
// from it, if any) by replaying its labels from the initial state.
// The violation why is told with the same names.
func (k *checker) trace(init *state, path []label, last bool, why string) ([]string, string) {
	k.explain = true
	defer func() { k.explain = false }()
	var lines []string
	s := init
	// Workers are renumbered at every step (canon); a trace names each
	// by the one name it had from the start.
	names := make([]int, len(init.workers))
	for i := range names {
		names[i] = i + 1
	}
	named := func(desc string) string {
		return workerRef.ReplaceAllStringFunc(desc, func(m string) string {
			i, _ := strconv.Atoi(m[2 : len(m)-1])
			return "w" + strconv.Itoa(names[i-1])
		})
	}
	for n, l := range path {
		found := false
		for _, e := range k.succ(s) {
			if e.l == l {
				if n == len(path)-1 && last {
					why = named(why) // the violation is told in the names before its step
				}
				desc := named(e.desc)
				lines = append(lines, fmt.Sprintf("%2d. %s", n+1, desc))
				next := make([]int, len(names))
				for to, from := range e.perm {
					next[to] = names[from]
				}
				s, names, found = e.s, next, true
				break
			}
		}
		if !found {
			lines = append(lines, fmt.Sprintf("%2d. (transition %v not found on replay)", n+1, l))
			break
		}
	}
	if !last {
		why = named(why)
	}
	return lines, why
}

// pathTo is the transitions from the initial state to state at, and the
// transition last from it, if any.
func pathTo(at int32, parent []int32, labels []label, last *label) []label {
	var path []label
	for i := at; i > 0; i = parent[i] {
		path = append(path, labels[i])
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	if last != nil {
		path = append(path, *last)
	}
	return path
}
