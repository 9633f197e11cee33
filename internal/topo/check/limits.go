package check

import (
	"fmt"
	"strconv"
	"strings"

	"eaimq/internal/topo"
)

// version is a RabbitMQ version as connection.start gives it (3.10.8,
// 4.0.5, 4.1.0-rc.1).
type version struct {
	raw                 string
	major, minor, patch int
	ok                  bool
}

func parseVersion(s string) version {
	v := version{raw: s}
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return v
	}
	nums := make([]int, 3)
	for i, p := range parts {
		end := strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' })
		if end == 0 || (end > 0 && i < len(parts)-1) {
			return v // "3.x.1", "3.10x.1"
		}
		if end > 0 {
			p = p[:end]
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return v
		}
		nums[i] = n
	}
	v.major, v.minor, v.patch, v.ok = nums[0], nums[1], nums[2], true
	return v
}

// atLeast says whether v is major.minor or later (false when unknown).
func (v version) atLeast(major, minor int) bool {
	return v.ok && (v.major > major || v.major == major && v.minor >= minor)
}

// limits finds the quorum queues without an explicit delivery limit: the
// vhost's (with rabbitmqctl: by argument, policy or operator policy), or
// claim.in and claim.dead as AMQP tells them (by argument only). A
// consumer's delay queue returns nothing and is left out.
func (d *deployment) limits() []finding {
	var out []finding
	seen := 0
	if d.ctl && d.queues != nil {
		for _, q := range d.queues {
			if q.Type != string(topo.Quorum) || isDelay(q.Name) {
				continue
			}
			seen++
			def, op := d.policyOf(q)
			if q.Args[topo.DeliveryLimitArg] != nil || def["delivery-limit"] != nil || op["delivery-limit"] != nil {
				continue
			}
			dlx := q.Args["x-dead-letter-exchange"] != nil || def["dead-letter-exchange"] != nil
			out = append(out, d.noLimit(q.Name, q.Policy, dlx, ""))
		}
	} else {
		for _, name := range []string{topo.Queue, topo.DeadQueue} {
			if st := d.ours[name]; st.Type == topo.Quorum {
				seen++
				if st.NoLimit {
					out = append(out, d.noLimit(name, "", name == topo.Queue, " (unless a policy sets delivery-limit: not seen without rabbitmqctl)"))
				}
			}
		}
	}
	if seen > 0 && len(out) == 0 {
		out = append(out, okf("every quorum queue but the delay queues has an explicit delivery limit", ""))
	}
	return out
}

// noLimit is the warning for quorum queue name without a delivery limit:
// what 4.x's default does to it, and the remedy.
func (d *deployment) noLimit(name, policy string, dlx bool, unseen string) finding {
	effect := "RabbitMQ 4.x dead-letters a message at its 21st delivery (its default limit is 20, and every nack with requeue " +
		"and every channel closed with the message unacked counts); 3.x sets no limit"
	if !dlx {
		effect = "RabbitMQ 4.x DROPS a message returned 20 times (its default limit; the queue has no dead-letter exchange); 3.x sets no limit"
	}
	if name == topo.DeadQueue {
		effect += "; every dlq list, show and dlq serve page returns each dead letter it reads"
	}
	limit, pname := topo.DeliveryLimit, "eaimq-claim-in"
	if name == topo.DeadQueue {
		limit, pname = topo.DeadDeliveryLimit, "eaimq-claim-dead"
	}
	var fix string
	switch {
	case name != topo.Queue && name != topo.DeadQueue:
		fix = "declare it with x-delivery-limit, or give it a delivery-limit policy"
	case policy != "":
		fix = fmt.Sprintf("topology -migrate quorum (consumers stopped) declares it again with %s=%d, claims and all; or, in place, "+
			"add \"delivery-limit\":%d to its policy %s (one policy applies to a queue)", topo.DeliveryLimitArg, limit, limit, policy)
	default:
		fix = fmt.Sprintf("topology -migrate quorum (consumers stopped) declares it again with %s=%d, claims and all; or, in place, "+
			"rabbitmqctl -p %s set_policy --apply-to queues %s '^%s$' '{\"delivery-limit\":%d}'",
			topo.DeliveryLimitArg, limit, d.vhost, pname, strings.ReplaceAll(name, ".", `\.`), limit)
	}
	return warnf("quorum queue "+name+" has no explicit delivery limit"+unseen, effect+". Fix: "+fix)
}

// deadLettering finds the quorum queues that dead-letter at most once: a
// node failing while one dead-letters loses the message, and on 4.x the
// default delivery limit makes dead-lettering common. At-least-once needs
// x-overflow=reject-publish too; the broker falls back to at-most-once
// without it. Without rabbitmqctl, claim.in is what the contract check
// found: its quorum spec has both.
func (d *deployment) deadLettering() []finding {
	if !d.ctl || d.queues == nil {
		if d.ours[topo.Queue].Type == topo.Quorum {
			return []finding{okf("claim.in dead-letters at least once", "")}
		}
		return nil
	}
	var out []finding
	seen := 0
	for _, q := range d.queues {
		def, _ := d.policyOf(q)
		if q.Type != string(topo.Quorum) || (q.Args["x-dead-letter-exchange"] == nil && def["dead-letter-exchange"] == nil) {
			continue
		}
		seen++
		strategy, overflow := setting(q, def, "dead-letter-strategy"), setting(q, def, "overflow")
		switch {
		case strategy != "at-least-once":
			out = append(out, warnf("quorum queue "+q.Name+" dead-letters at most once",
				"a node failing while it dead-letters loses the message, and 4.x's delivery limit dead-letters more often; "+
					"declare it with x-dead-letter-strategy=at-least-once and x-overflow=reject-publish (topology -queue-type quorum does)"))
		case overflow != "reject-publish":
			out = append(out, warnf("quorum queue "+q.Name+" asks for at-least-once dead-lettering without x-overflow=reject-publish",
				"the broker falls back to at most once; declare it with x-overflow=reject-publish"))
		}
	}
	if seen > 0 && len(out) == 0 {
		out = append(out, okf("every quorum queue that dead-letters does so at least once", ""))
	}
	return out
}

// setting is q's x-KEY argument, else its policy's KEY, as a string.
func setting(q queueInfo, def map[string]any, key string) string {
	if v, ok := q.Args["x-"+key]; ok {
		return fmt.Sprint(v)
	}
	if v, ok := def[key]; ok {
		return fmt.Sprint(v)
	}
	return ""
}
