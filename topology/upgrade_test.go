package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/topo/topotest"
)

// brokerVersion is the tests' broker's version, as connection.start says.
func brokerVersion(t *testing.T, vh *brokertest.VHost) string {
	t.Helper()
	v, _ := vh.Dial(t).Properties["version"].(string)
	if v == "" {
		t.Fatal("the broker gave no version in connection.start")
	}
	return v
}

// contractLines is the lines of a -check that are the contract's own.
func contractLines(stdout string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if !strings.Contains(l, " 4.x: ") {
			out = append(out, l)
		}
	}
	return out
}

// TestCheckMirroredPolicy: on a 3.x deployment whose queues a classic
// mirroring policy covers, -check keeps its contract lines and exit 0,
// and adds the pre-upgrade findings: the broker's version with its
// upgrade path, and the policy naming the queues it mirrors; -strict
// exits 1 on them; -json carries them apart from the contract's "ok".
// RabbitMQ 4 refuses a policy with ha-* keys: on 4.x the test checks that
// refusal instead (the broker truly differs there).
func TestCheckMirroredPolicy(t *testing.T) {
	vh := brokertest.New(t)
	if code, _, stderr := runTopology(t, vh); code != 0 {
		t.Fatalf("topology: %d %s", code, stderr)
	}
	_, before, _ := runTopology(t, vh, "-check")
	_, err := vh.Ctl.Run(context.Background(), "-q", "set_policy", "-p", vh.Name, "--apply-to", "queues", "mirror-claims", `^claim\.`, `{"ha-mode":"all","ha-sync-mode":"automatic"}`)
	if v := brokerVersion(t, vh); !strings.HasPrefix(v, "3.") {
		if err == nil || !strings.Contains(err.Error(), "Validation failed") {
			t.Fatalf("RabbitMQ %s took a classic mirroring policy: %v", v, err)
		}
		t.Logf("RabbitMQ %s has no classic mirroring: it refused the policy (%v)", v, err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runTopology(t, vh, "-check")
	t.Logf("topology -check:\n%s", stdout)
	if code != 0 {
		t.Fatalf("-check: exit %d, want 0 (warnings only)\n%s", code, stderr)
	}
	if got, want := strings.Join(contractLines(stdout), "\n"), strings.Join(contractLines(before), "\n"); got != want {
		t.Errorf("the contract's lines changed with the policy:\n%s\nwant\n%s", got, want)
	}
	for _, want := range []string{
		"ok      4.x: broker RabbitMQ 3.",
		"warn    4.x: upgrade path: 3.",
		"warn    4.x: classic mirrored queues: policy mirror-claims (ha-mode=all, ha-sync-mode=automatic) mirrors claim.dead, claim.dead.archive, claim.in: 4.x has no classic mirroring",
		"topology -migrate quorum",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("-check lacks %q", want)
		}
	}
	if code, _, stderr := runTopology(t, vh, "-check", "-strict"); code != cli.ExitFailure || !strings.Contains(stderr, "finding(s) for RabbitMQ 4.x") {
		t.Errorf("-check -strict: exit %d, want %d: %s", code, cli.ExitFailure, stderr)
	}
	code, stdout, _ = runTopology(t, vh, "-check", "-json")
	var r struct {
		OK      bool `json:"ok"`
		Upgrade struct {
			Broker string `json:"broker"`
			OK     bool   `json:"ok"`
			Items  []struct {
				What string `json:"what"`
				OK   bool   `json:"ok"`
			} `json:"items"`
		} `json:"upgrade"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 0 || !r.OK || r.Upgrade.OK || !strings.HasPrefix(r.Upgrade.Broker, "RabbitMQ 3.") {
		t.Fatalf("-check -json: exit %d, %v:\n%s", code, err, stdout)
	}
	found := false
	for _, it := range r.Upgrade.Items {
		found = found || (!it.OK && strings.HasPrefix(it.What, "4.x: classic mirrored queues"))
	}
	if !found {
		t.Errorf("-check -json: no mirrored finding in %+v", r.Upgrade.Items)
	}
}

// TestCheckOlderQuorumQueues: quorum queues an older eaimq declared,
// without x-delivery-limit, pass the contract (declared again without a
// 406, the queues kept, with a warning on stderr) and -check names them
// as the 4.x findings, with the remedy; a policy that sets the limit on
// claim.in answers its finding, and -migrate quorum answers both.
func TestCheckOlderQuorumQueues(t *testing.T) {
	vh := brokertest.New(t)
	topotest.DeclareOlderQuorum(t, vh)
	code, stdout, stderr := runTopology(t, vh, "-queue-type", "quorum")
	if code != 0 || !strings.Contains(stderr, "topology: warning: quorum queue claim.in") || !strings.Contains(stderr, "topology: warning: quorum queue claim.dead") {
		t.Fatalf("topology -queue-type quorum on the older queues: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stdout, _ := runTopology(t, vh, "-queue-type", "quorum", "-json"); !strings.Contains(stdout, `"kept_without_delivery_limit":["claim.dead","claim.in"]`) {
		t.Errorf("-json: %s", stdout)
	}
	code, stdout, stderr = runTopology(t, vh, "-check", "-queue-type", "quorum")
	t.Logf("topology -check -queue-type quorum:\n%s", stdout)
	for _, want := range []string{
		"ok      queue claim.in (durable, x-queue-type=quorum, x-dead-letter-exchange=eai.dlx, x-dead-letter-routing-key=claim.dead, x-dead-letter-strategy=at-least-once, x-overflow=reject-publish, x-delivery-limit=20): declared without x-delivery-limit",
		"warn    4.x: quorum queue claim.in has no explicit delivery limit: RabbitMQ 4.x dead-letters a message at its 21st delivery",
		"warn    4.x: quorum queue claim.dead has no explicit delivery limit: RabbitMQ 4.x DROPS a message returned 20 times",
		"ok      4.x: every quorum queue that dead-letters does so at least once",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("-check lacks %q", want)
		}
	}
	if code != 0 {
		t.Errorf("-check: exit %d\n%s", code, stderr)
	}
	if _, err := vh.Ctl.Run(context.Background(), "-q", "set_policy", "-p", vh.Name, "--apply-to", "queues", "eaimq-claim-in", `^claim\.in$`, `{"delivery-limit":20}`); err != nil {
		t.Fatal(err)
	}
	_, stdout, _ = runTopology(t, vh, "-check", "-queue-type", "quorum")
	if strings.Contains(stdout, "claim.in has no explicit delivery limit") || !strings.Contains(stdout, "claim.dead has no explicit delivery limit") {
		t.Errorf("with the policy on claim.in:\n%s", stdout)
	}
	if code, stdout, stderr := runTopology(t, vh, "-migrate", "quorum"); code != 0 {
		t.Fatalf("-migrate quorum: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runTopology(t, vh, "-check", "-queue-type", "quorum", "-strict")
	if strings.Contains(stdout, "no explicit delivery limit") || strings.Contains(stdout, "declared without") {
		t.Errorf("after -migrate quorum (exit %d):\n%s", code, stdout)
	}
}

// TestCheckTransientQueue: a transient non-exclusive queue in the vhost is
// a finding (4.x deprecates them); an exclusive one is not.
func TestCheckTransientQueue(t *testing.T) {
	vh := brokertest.New(t)
	if code, _, stderr := runTopology(t, vh); code != 0 {
		t.Fatalf("topology: %d %s", code, stderr)
	}
	ch := vh.Channel(t)
	if _, err := ch.QueueDeclare("scratch", false /* durable */, false, false /* exclusive */, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("mine", false, false, true /* exclusive */, false, nil); err != nil {
		t.Fatal(err)
	}
	_, stdout, _ := runTopology(t, vh, "-check")
	if !strings.Contains(stdout, "warn    4.x: transient non-exclusive queues: scratch:") {
		t.Errorf("-check:\n%s", stdout)
	}
}

// TestCheckGlobalQoS: on 3.x, a channel of the vhost with global QoS is a
// finding. RabbitMQ 3.13 and later cannot list it (list_channels has no
// global_prefetch_count there): -check says so in a note instead.
func TestCheckGlobalQoS(t *testing.T) {
	vh := brokertest.New(t)
	if code, _, stderr := runTopology(t, vh); code != 0 {
		t.Fatalf("topology: %d %s", code, stderr)
	}
	ch := vh.Channel(t)
	if err := ch.Qos(10, 0, true /* global */); err != nil {
		t.Fatal(err)
	}
	_, stdout, _ := runTopology(t, vh, "-check")
	if strings.HasPrefix(brokerVersion(t, vh), "3.") && !strings.HasPrefix(brokerVersion(t, vh), "3.13") {
		if !strings.Contains(stdout, "warn    4.x: channels with global QoS (basic.qos global=true): ") || !strings.Contains(stdout, "(global prefetch 10)") {
			t.Errorf("-check:\n%s", stdout)
		}
		return
	}
	if !strings.Contains(stdout, "note    4.x: global QoS not checked") {
		t.Errorf("-check:\n%s", stdout)
	}
}

// TestCheckWithoutCtl: when rabbitmqctl cannot be used, the findings AMQP
// can make are made (version, path, claim.in's limit) and a note names
// what was not checked.
func TestCheckWithoutCtl(t *testing.T) {
	vh := brokertest.New(t)
	if code, _, stderr := runTopology(t, vh, "-queue-type", "quorum"); code != 0 {
		t.Fatalf("topology: %d %s", code, stderr)
	}
	var out, errb strings.Builder
	err := run(context.Background(), []string{"-check", "-queue-type", "quorum"},
		vh.Getenv(map[string]string{"EAIMQ_RABBITMQCTL": "false"}), &out, &errb)
	stdout := out.String()
	if cli.Code(err) != 0 || !strings.Contains(stdout, "upgrade path") || !strings.Contains(stdout, "ok      4.x: every quorum queue but the delay queues has an explicit delivery limit") ||
		!strings.Contains(stdout, "note    4.x: not checked: ") {
		t.Errorf("exit %d:\n%s%s", cli.Code(err), stdout, errb.String())
	}
}
