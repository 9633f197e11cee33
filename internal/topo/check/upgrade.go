package check

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/publish"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// upgraded is the pre-upgrade check's result, as -json prints it.
type upgraded struct {
	Broker   string   `json:"broker"`  // product and version, from connection.start
	Version  string   `json:"version"` // "" when the broker did not say
	OK       bool     `json:"ok"`      // no warning
	Items    []item   `json:"items"`
	Notes    []string `json:"notes,omitempty"` // what could not be checked
	warnings int
}

// deployment is what the pre-upgrade check knows of the broker and the
// vhost: from AMQP always, and from rabbitmqctl when there is one (ctl).
type deployment struct {
	product string
	version version
	vhost   string
	ours    map[string]topo.QueueState // claim.in and claim.dead, over AMQP

	ctl                   bool     // what follows was read with rabbitmqctl
	unread                []string // what rabbitmqctl could not read
	queues                []queueInfo
	policies, opPolicies  []policy
	nodes                 map[string]string // node -> RabbitMQ version
	flags                 []flagInfo
	maxMessage            int64    // bytes; 0 when unknown
	consumerTimeout       int64    // ms; 0 when unset
	globalQoS, deprecated []string // channels with global QoS (3.12-), deprecated features used (3.13+)
}

// finding is one line of the pre-upgrade check.
type finding struct {
	warn         bool
	what, detail string
}

func okf(what, detail string) finding   { return finding{false, what, detail} }
func warnf(what, detail string) finding { return finding{true, what, detail} }

// upgrade runs the pre-upgrade check on what -check found (c.ours), the
// connection's server properties, and rabbitmqctl (ctl, or why there is
// none), and reports each finding: warnings never make the contract's
// result fail, -strict makes them exit 1.
func (c *report) upgrade(ctx context.Context, conn *amqp.Connection, cfg Config, ctl rabbitctl.Ctl, why string) *upgraded {
	d := &deployment{product: prop(conn.Properties, "product"), version: parseVersion(prop(conn.Properties, "version")),
		vhost: cfg.VHost, ours: c.ours}
	if why == "" {
		d.gather(ctx, ctl, cfg.VHost)
	}
	up := &upgraded{Broker: strings.TrimSpace(d.product + " " + d.version.raw), Version: d.version.raw, Items: []item{}}
	for _, f := range d.findings() {
		up.Items = append(up.Items, item{What: "4.x: " + f.what, OK: !f.warn, Detail: f.detail})
		if f.warn {
			up.warnings++
		}
		c.line(map[bool]string{false: "ok     ", true: "warn   "}[f.warn], "4.x: "+f.what, f.detail)
	}
	for _, n := range d.notes(why) {
		up.Notes = append(up.Notes, n)
		c.line("note   ", "4.x: "+n, "")
	}
	up.OK = up.warnings == 0
	c.Upgrade = up
	return up
}

// line prints one line of text output (nothing for JSON).
func (c *report) line(status, what, detail string) {
	if c.text == nil {
		return
	}
	if detail != "" {
		what += ": " + detail
	}
	fmt.Fprintf(c.text, "%s %s\n", status, what)
}

func prop(t amqp.Table, k string) string { s, _ := t[k].(string); return s }

// findings is the pre-upgrade check proper: a pure function of what was
// read, so that each rule is tested without a broker of each version.
func (d *deployment) findings() []finding {
	out := []finding{d.brokerLine(), d.path()}
	if d.ctl && d.flags != nil {
		out = append(out, d.featureFlags()...)
	}
	if d.ctl && d.queues != nil {
		out = append(out, d.mirrored(), d.transient())
	}
	out = append(out, d.limits()...)
	out = append(out, d.deadLettering()...)
	if d.ctl {
		out = append(out, d.global()...)
	}
	if d.maxMessage > 0 {
		out = append(out, d.messageSize())
	}
	if d.consumerTimeout > 0 {
		out = append(out, okf("consumer_timeout "+strconv.FormatInt(d.consumerTimeout/1000, 10)+" s",
			"consumer --http-timeout must stay below it; past it 3.x closes the consumer's channel, and later 4.x releases cancel the consumer instead"))
	}
	return out
}

// notes say what the check could not see.
func (d *deployment) notes(why string) []string {
	var out []string
	if why != "" {
		out = append(out, "not checked without rabbitmqctl ("+why+"): policies (ha-*, delivery-limit), the vhost's other queues "+
			"(transient non-exclusive), global QoS, feature flags, max_message_size, the other nodes' versions")
	}
	for _, u := range d.unread {
		out = append(out, "not checked: "+u)
	}
	switch {
	case d.ctl && !d.version.atLeast(3, 13):
		out = append(out, "global QoS: only the channels open now are seen (the consumer's prefetch is per consumer)")
	case d.ctl:
		out = append(out, "global QoS not checked: 3.13 and later list no channel's global prefetch (the consumer's prefetch is per consumer)")
	}
	return out
}

func (d *deployment) brokerLine() finding {
	what := strings.TrimSpace("broker " + d.product + " " + d.version.raw)
	if len(d.nodes) == 0 {
		return okf(what, "the node this connection reached (connection.start)")
	}
	names := make([]string, 0, len(d.nodes))
	versions := map[string]bool{}
	for n, v := range d.nodes {
		names = append(names, n+" "+v)
		versions[v] = true
	}
	slices.Sort(names)
	if len(versions) > 1 {
		return warnf(what, "the nodes run different versions ("+strings.Join(names, ", ")+"): finish the upgrade in progress first")
	}
	return okf(what, "nodes: "+strings.Join(names, ", "))
}

// path is the upgrade path from the broker's version to 4.x: a rolling
// upgrade cannot skip a minor version, and 4.0 needs 3.13 with every
// stable feature flag enabled; the other way is a new 4.x cluster.
func (d *deployment) path() finding {
	v := d.version
	const blueGreen = "or move to a new 4.x cluster (blue-green: import the definitions, move the claims with a shovel; docs/upgrade.md)"
	switch {
	case !v.ok:
		return warnf("upgrade path", fmt.Sprintf("the broker did not give a version I can read (%q): see docs/upgrade.md", v.raw))
	case v.major >= 4:
		return okf("upgrade path", "already "+v.raw+"; within 4.x a rolling upgrade goes one minor version at a time, every stable feature flag enabled first")
	case v.major == 3 && v.minor == 13:
		return okf("upgrade path", "3.13 -> 4.x is a rolling upgrade once every stable feature flag is enabled (rabbitmqctl enable_feature_flag all); "+
			"not with khepri_db enabled: then only a new cluster")
	case v.major == 3 && v.minor >= 8:
		steps := []string{fmt.Sprintf("%d.%d", v.major, v.minor)}
		for m := v.minor + 1; m <= 13; m++ {
			s := fmt.Sprintf("3.%d", m)
			if m == 11 {
				s = "3.11.18 or later"
			}
			steps = append(steps, s)
		}
		return warnf("upgrade path", fmt.Sprintf("%s cannot become 4.x in one step: a rolling upgrade cannot skip a minor version: %s -> 4.x, "+
			"enabling every stable feature flag before each step; %s. A 4.x package installed over %s's data does not start "+
			"(Debian 12 -> 13 is 3.10.8 -> 4.0.5)", v.raw, strings.Join(steps, " -> "), blueGreen, v.raw))
	}
	return warnf("upgrade path", v.raw+" has no rolling upgrade path to 4.x: "+blueGreen)
}

func (d *deployment) featureFlags() []finding {
	var off []string
	var out []finding
	for _, f := range d.flags {
		if f.Stability == "stable" && f.State != "enabled" {
			off = append(off, f.Name)
		}
		if f.Name == "khepri_db" && f.State == "enabled" && d.version.major == 3 {
			out = append(out, warnf("feature flag khepri_db enabled", "3.13 with Khepri has no in-place upgrade to 4.0: only a new cluster"))
		}
	}
	if len(off) > 0 {
		out = append(out, warnf("stable feature flags disabled: "+strings.Join(off, ", "),
			"the next version refuses to start until they are enabled: rabbitmqctl enable_feature_flag all"))
	} else {
		out = append(out, okf("every stable feature flag is enabled", ""))
	}
	return out
}

// policyOf is the definition of the policy the broker applied to q, and of
// the operator policy that applies to it (matched here: list_queues of
// 3.x does not name it).
func (d *deployment) policyOf(q queueInfo) (def, op map[string]any) {
	for _, p := range d.policies {
		if p.Name == q.Policy {
			def = p.Definition
		}
	}
	best := -1 << 31
	for _, p := range d.opPolicies {
		re, err := regexp.Compile(p.Pattern)
		if err != nil || !re.MatchString(q.Name) || !appliesTo(p.ApplyTo, q.Type) || p.Priority < best {
			continue
		}
		op, best = p.Definition, p.Priority
	}
	return def, op
}

func appliesTo(applyTo, queueType string) bool {
	return applyTo == "all" || applyTo == "queues" || applyTo == queueType+"_queues"
}

func (d *deployment) mirrored() finding {
	byPolicy := map[string][]string{}
	keys := map[string][]string{}
	for _, q := range d.queues {
		def, _ := d.policyOf(q)
		var ha []string
		for k, v := range def {
			if strings.HasPrefix(k, "ha-") {
				ha = append(ha, fmt.Sprintf("%s=%v", k, v))
			}
		}
		if len(ha) > 0 {
			slices.Sort(ha)
			byPolicy[q.Policy] = append(byPolicy[q.Policy], q.Name)
			keys[q.Policy] = ha
		}
	}
	if len(byPolicy) == 0 {
		return okf("no queue of vhost "+strconv.Quote(d.vhost)+" is mirrored by a classic mirroring (ha-*) policy", "")
	}
	var parts, names []string
	for p, qs := range byPolicy {
		slices.Sort(qs)
		parts = append(parts, fmt.Sprintf("policy %s (%s) mirrors %s", p, strings.Join(keys[p], ", "), strings.Join(qs, ", ")))
		names = append(names, p)
	}
	slices.Sort(parts)
	slices.Sort(names)
	return warnf("classic mirrored queues", strings.Join(parts, "; ")+
		": 4.x has no classic mirroring (the ha-* keys have no effect, and 4.x refuses a policy that sets them): "+
		"each such queue keeps one copy, on the node it is on. For claims that must outlive a node, move claim.in and claim.dead "+
		"to quorum queues before the upgrade (topology -migrate quorum, consumers stopped); then take the ha-* keys out "+
		"(rabbitmqctl -p "+d.vhost+" clear_policy "+strings.Join(names, ", clear_policy ")+", or set_policy again without them)")
}

func (d *deployment) transient() finding {
	var names []string
	for _, q := range d.queues {
		if !q.Durable && !q.Exclusive {
			names = append(names, q.Name)
		}
	}
	if len(names) == 0 {
		return okf("no transient non-exclusive queue in vhost "+strconv.Quote(d.vhost), "")
	}
	return warnf("transient non-exclusive queues: "+strings.Join(names, ", "),
		"deprecated in 4.x (transient_nonexcl_queues: permitted in 4.0, to be refused later), and lost with their messages when their node restarts; declare them durable, or exclusive")
}

// global is global QoS and the deprecated features in use: 3.13 and later
// list the features in use; before, global QoS is read off the channels.
func (d *deployment) global() []finding {
	if d.version.atLeast(3, 13) {
		if d.deprecated == nil && slices.ContainsFunc(d.unread, func(s string) bool { return strings.HasPrefix(s, "deprecated") }) {
			return nil
		}
		if len(d.deprecated) == 0 {
			return []finding{okf("no deprecated feature reported in use on this broker (rabbitmqctl list_deprecated_features --used)", "")}
		}
		return []finding{warnf("deprecated features in use on this broker: "+strings.Join(d.deprecated, ", "),
			"each is removed or refused in a later 4.x (rabbitmqctl list_deprecated_features)")}
	}
	if len(d.globalQoS) == 0 {
		return []finding{okf("no channel of vhost "+strconv.Quote(d.vhost)+" uses global QoS", "")}
	}
	return []finding{warnf("channels with global QoS (basic.qos global=true): "+strings.Join(d.globalQoS, "; "),
		"deprecated in 4.x (global_qos), and quorum queues ignore it; use a prefetch per consumer, as consumer --prefetch does")}
}

func (d *deployment) messageSize() finding {
	limit := int64(publish.DefaultMaxBytes)
	what := fmt.Sprintf("max_message_size %d bytes", d.maxMessage)
	if d.maxMessage < limit {
		return warnf(what, fmt.Sprintf("below publish's default -max-bytes of %d (16 MiB): a claim in between passes publish's check "+
			"and is refused by the broker; raise max_message_size in rabbitmq.conf, or publish with -max-bytes %d", limit, d.maxMessage))
	}
	if d.version.major == 3 && d.maxMessage > limit {
		return okf(what, "at least publish's default -max-bytes (16 MiB); 4.x's default is 16 MiB: if claims above it are "+
			"published (-max-bytes), keep max_message_size in rabbitmq.conf through the upgrade")
	}
	return okf(what, "at least publish's default -max-bytes (16 MiB)")
}

// isDelay tells a consumer's delay queue: nothing consumes it, so it
// returns nothing and no delivery limit applies to it.
func isDelay(name string) bool { return strings.HasPrefix(name, retry.QueuePrefix) }
