package check

import (
	"strings"
	"testing"

	"eaimq/internal/topo"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in                  string
		ok                  bool
		major, minor, patch int
	}{
		{"3.10.8", true, 3, 10, 8},
		{"4.0.5", true, 4, 0, 5},
		{"4.1.0-rc.1", true, 4, 1, 0},
		{"3.13", true, 3, 13, 0},
		{"", false, 0, 0, 0},
		{"x.1", false, 0, 0, 0},
		{"3.x.1", false, 0, 0, 0},
		{"3", false, 0, 0, 0},
	} {
		v := parseVersion(tc.in)
		if v.ok != tc.ok || v.major != tc.major || v.minor != tc.minor || v.patch != tc.patch {
			t.Errorf("parseVersion(%q) = %+v", tc.in, v)
		}
	}
	if !parseVersion("3.13.1").atLeast(3, 13) || parseVersion("3.12.9").atLeast(3, 13) || !parseVersion("4.0.0").atLeast(3, 13) || parseVersion("").atLeast(0, 0) {
		t.Error("atLeast")
	}
}

// TestPath: the upgrade path names every minor version between, 3.11.18
// included, and only 3.13 and 4.x have a direct one.
func TestPath(t *testing.T) {
	for _, tc := range []struct {
		version string
		warn    bool
		want    string
	}{
		{"3.10.8", true, "3.10 -> 3.11.18 or later -> 3.12 -> 3.13 -> 4.x"},
		{"3.12.14", true, "3.12 -> 3.13 -> 4.x"},
		{"3.11.2", true, "3.11 -> 3.12 -> 3.13 -> 4.x"},
		{"3.13.7", false, "3.13 -> 4.x is a rolling upgrade once every stable feature flag is enabled"},
		{"4.0.5", false, "already 4.0.5"},
		{"3.7.28", true, "no rolling upgrade path to 4.x"},
		{"", true, "did not give a version"},
	} {
		f := (&deployment{version: parseVersion(tc.version)}).path()
		if f.warn != tc.warn || !strings.Contains(f.detail, tc.want) {
			t.Errorf("%s: %+v; want warn=%v and %q", tc.version, f, tc.warn, tc.want)
		}
	}
}

func quorumQ(name string, args map[string]any, policy string) queueInfo {
	a := map[string]any{"x-queue-type": "quorum"}
	for k, v := range args {
		a[k] = v
	}
	return queueInfo{Name: name, Type: "quorum", Durable: true, Policy: policy, Args: a}
}

// TestLimits: a quorum queue's delivery limit counts as explicit by its
// argument, its policy or a matching operator policy; without one, 4.x's
// default is named with what it does: dead-lettering where there is a
// dead-letter exchange, dropping where there is none (claim.dead); a
// delay queue is left out. Without rabbitmqctl, claim.in and claim.dead
// are judged as AMQP found them.
func TestLimits(t *testing.T) {
	dlx := map[string]any{"x-dead-letter-exchange": "eai.dlx"}
	d := &deployment{vhost: "v", ctl: true,
		queues: []queueInfo{
			quorumQ(topo.Queue, dlx, ""),
			quorumQ(topo.DeadQueue, nil, "keep"),
			quorumQ("by-arg", map[string]any{"x-delivery-limit": 5}, ""),
			quorumQ("by-policy", nil, "limited"),
			quorumQ("by-operator", nil, ""),
			quorumQ("claim.retry.1s", nil, ""),
			{Name: "classic", Type: "classic", Durable: true},
		},
		policies:   []policy{{Name: "limited", Definition: map[string]any{"delivery-limit": 7}}, {Name: "keep", Definition: map[string]any{"max-length": 9}}},
		opPolicies: []policy{{Name: "op", Pattern: "^by-op", ApplyTo: "queues", Definition: map[string]any{"delivery-limit": 9}}},
	}
	fs := d.limits()
	if len(fs) != 2 {
		t.Fatalf("want claim.in and claim.dead, got %+v", fs)
	}
	in, dead := fs[0], fs[1]
	if !in.warn || !strings.Contains(in.what, "claim.in has no explicit delivery limit") || !strings.Contains(in.detail, "dead-letters a message at its 21st delivery") ||
		!strings.Contains(in.detail, `rabbitmqctl -p v set_policy --apply-to queues eaimq-claim-in '^claim\.in$' '{"delivery-limit":20}'`) {
		t.Errorf("claim.in: %+v", in)
	}
	if !dead.warn || !strings.Contains(dead.detail, "DROPS a message returned 20 times") || !strings.Contains(dead.detail, "dlq") ||
		!strings.Contains(dead.detail, `add "delivery-limit":2147483647 to its policy keep`) {
		t.Errorf("claim.dead: %+v", dead)
	}

	amqpOnly := &deployment{ours: map[string]topo.QueueState{
		topo.Queue:     {Exists: true, Type: topo.Quorum, NoLimit: true},
		topo.DeadQueue: {Exists: true, Type: topo.Quorum},
	}}
	if fs := amqpOnly.limits(); len(fs) != 1 || !strings.Contains(fs[0].what, "claim.in") || !strings.Contains(fs[0].what, "not seen without rabbitmqctl") {
		t.Errorf("AMQP only: %+v", fs)
	}
	amqpOnly.ours[topo.Queue] = topo.QueueState{Exists: true, Type: topo.Quorum}
	if fs := amqpOnly.limits(); len(fs) != 1 || fs[0].warn {
		t.Errorf("AMQP only, with the limits: %+v", fs)
	}
	if fs := (&deployment{ours: map[string]topo.QueueState{topo.Queue: {Exists: true, Type: topo.Classic}}}).limits(); len(fs) != 0 {
		t.Errorf("classic: %+v", fs)
	}
}

// TestDeadLettering: at-most-once (by default, by argument or by policy)
// and at-least-once without reject-publish are both warned of.
func TestDeadLettering(t *testing.T) {
	dlx := map[string]any{"x-dead-letter-exchange": "eai.dlx"}
	good := map[string]any{"x-dead-letter-exchange": "eai.dlx", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
	d := &deployment{ctl: true, queues: []queueInfo{
		quorumQ("good", good, ""),
		quorumQ("default", dlx, ""),
		quorumQ("no-overflow", map[string]any{"x-dead-letter-exchange": "eai.dlx", "x-dead-letter-strategy": "at-least-once"}, ""),
		quorumQ("by-policy", nil, "alo"),
		quorumQ("no-dlx", nil, ""),
	}, policies: []policy{{Name: "alo", Definition: map[string]any{"dead-letter-exchange": "x", "dead-letter-strategy": "at-least-once", "overflow": "reject-publish"}}}}
	fs := d.deadLettering()
	var got []string
	for _, f := range fs {
		got = append(got, f.what)
	}
	want := []string{"quorum queue default dead-letters at most once", "quorum queue no-overflow asks for at-least-once dead-lettering without x-overflow=reject-publish"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestMirroredTransientGlobal(t *testing.T) {
	d := &deployment{vhost: "v", ctl: true, version: parseVersion("3.10.8"),
		queues: []queueInfo{
			{Name: topo.Queue, Type: "classic", Durable: true, Policy: "ha"},
			{Name: topo.DeadQueue, Type: "classic", Durable: true, Policy: "ha"},
			{Name: "scratch", Type: "classic"},
			{Name: "mine", Type: "classic", Exclusive: true},
		},
		policies:  []policy{{Name: "ha", Definition: map[string]any{"ha-mode": "all", "ha-sync-mode": "automatic"}}},
		globalQoS: []string{"127.0.0.1:5 (1) (global prefetch 10)"},
	}
	if f := d.mirrored(); !f.warn || !strings.Contains(f.detail, "policy ha (ha-mode=all, ha-sync-mode=automatic) mirrors claim.dead, claim.in") ||
		!strings.Contains(f.detail, "clear_policy ha") {
		t.Errorf("mirrored: %+v", f)
	}
	if f := d.transient(); !f.warn || f.what != "transient non-exclusive queues: scratch" {
		t.Errorf("transient: %+v", f)
	}
	if fs := d.global(); len(fs) != 1 || !fs[0].warn || !strings.Contains(fs[0].what, "global prefetch 10") {
		t.Errorf("global QoS: %+v", fs)
	}
	d.policies[0].Definition = map[string]any{"max-length": 5}
	if f := d.mirrored(); f.warn {
		t.Errorf("no ha-* key: %+v", f)
	}
	d4 := &deployment{ctl: true, version: parseVersion("4.0.5"), deprecated: []string{"transient_nonexcl_queues"}}
	if fs := d4.global(); len(fs) != 1 || !fs[0].warn || !strings.Contains(fs[0].what, "transient_nonexcl_queues") {
		t.Errorf("4.x deprecated features: %+v", fs)
	}
}

func TestMessageSizeAndFlags(t *testing.T) {
	for _, tc := range []struct {
		version string
		size    int64
		warn    bool
		want    string
	}{
		{"3.10.8", 134217728, false, "keep max_message_size in rabbitmq.conf"},
		{"4.0.5", 16777216, false, "at least publish's default"},
		{"4.0.5", 8 << 20, true, "publish with -max-bytes 8388608"},
	} {
		f := (&deployment{version: parseVersion(tc.version), maxMessage: tc.size}).messageSize()
		if f.warn != tc.warn || !strings.Contains(f.detail, tc.want) {
			t.Errorf("%s %d: %+v", tc.version, tc.size, f)
		}
	}
	d := &deployment{version: parseVersion("3.13.7"), flags: []flagInfo{
		{"quorum_queue", "enabled", "stable"}, {"message_containers", "disabled", "stable"},
		{"khepri_db", "enabled", "experimental"}, {"other", "disabled", "experimental"}}}
	fs := d.featureFlags()
	if len(fs) != 2 || !strings.Contains(fs[0].what, "khepri_db") || fs[1].what != "stable feature flags disabled: message_containers" {
		t.Errorf("flags: %+v", fs)
	}
}

// TestBrokerLine: several nodes of one version are listed; of two versions,
// an upgrade is under way and is warned of.
func TestBrokerLine(t *testing.T) {
	d := &deployment{product: "RabbitMQ", version: parseVersion("3.13.7"), nodes: map[string]string{"b@h": "3.13.7", "a@h": "3.13.7"}}
	if f := d.brokerLine(); f.warn || f.what != "broker RabbitMQ 3.13.7" || f.detail != "nodes: a@h 3.13.7, b@h 3.13.7" {
		t.Errorf("%+v", f)
	}
	d.nodes["c@h"] = "4.0.5"
	if f := d.brokerLine(); !f.warn || !strings.Contains(f.detail, "different versions") {
		t.Errorf("%+v", f)
	}
}
