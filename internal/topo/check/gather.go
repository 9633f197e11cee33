package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"

	"eaimq/internal/rabbitctl"
)

// queueInfo is one queue of rabbitmqctl list_queues: what AMQP cannot see.
type queueInfo struct {
	Name      string
	Type      string
	Durable   bool
	Exclusive bool
	Policy    string         // the policy applied, "" when none
	Args      map[string]any // its x-arguments
}

// policy is one policy of rabbitmqctl list_policies (or
// list_operator_policies).
type policy struct {
	Name, Pattern, ApplyTo string
	Priority               int
	Definition             map[string]any
}

// flagInfo is one feature flag of rabbitmqctl list_feature_flags.
type flagInfo struct{ Name, State, Stability string }

// gather reads, with ctl, what the pre-upgrade check needs and AMQP cannot
// see: the vhost's queues with their arguments and policy, the policies,
// the cluster's node versions, the feature flags, two settings, and the
// channels with global QoS (3.12 and older: list_channels) or the
// deprecated features in use (3.13 and later). The commands run at once:
// each is mostly the CLI's Erlang VM starting. What could not be read is
// named in d.unread, for a note.
func (d *deployment) gather(ctx context.Context, ctl rabbitctl.Ctl, vhost string) {
	jobs := map[string]func() error{
		"queues": func() error {
			return runJSON(ctx, ctl, &d.queues, decodeQueues, "list_queues", "-p", vhost, "name", "type", "durable", "exclusive", "policy", "arguments")
		},
		"policies": func() error { return runJSON(ctx, ctl, &d.policies, decodePolicies, "list_policies", "-p", vhost) },
		"operator policies": func() error {
			return runJSON(ctx, ctl, &d.opPolicies, decodePolicies, "list_operator_policies", "-p", vhost)
		},
		"node versions": func() error { return runJSON(ctx, ctl, &d.nodes, decodeNodes, "cluster_status") },
		"feature flags": func() error {
			return runJSON(ctx, ctl, &d.flags, decodeFlags, "list_feature_flags", "name", "state", "stability")
		},
		"max_message_size and consumer_timeout": func() error { return d.settings(ctx, ctl) },
	}
	if d.version.atLeast(3, 13) {
		jobs["deprecated features in use"] = func() error {
			return runJSON(ctx, ctl, &d.deprecated, decodeDeprecated, "list_deprecated_features", "--used")
		}
	} else {
		jobs["channels with global QoS"] = func() error {
			return runJSON(ctx, ctl, &d.globalQoS, decodeGlobalQoS(vhost), "list_channels", "vhost", "name", "global_prefetch_count")
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for what, job := range jobs {
		wg.Go(func() {
			if err := job(); err != nil {
				mu.Lock()
				d.unread = append(d.unread, fmt.Sprintf("%s (rabbitmqctl: %v)", what, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	d.ctl = true
}

// runJSON runs rabbitmqctl -q ARGS --formatter json and decodes its output
// into *into with decode.
func runJSON[T any](ctx context.Context, ctl rabbitctl.Ctl, into *T, decode func([]byte) (T, error), args ...string) error {
	out, err := ctl.Run(ctx, append(append([]string{"-q"}, args...), "--formatter", "json")...)
	if err != nil {
		return err
	}
	v, err := decode(out)
	if err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	*into = v
	return nil
}

func decodeQueues(out []byte) ([]queueInfo, error) {
	var raw []struct {
		Name      string  `json:"name"`
		Type      string  `json:"type"`
		Durable   bool    `json:"durable"`
		Exclusive any     `json:"exclusive"` // 3.x writes "" for false
		Policy    string  `json:"policy"`
		Args      [][]any `json:"arguments"` // [name, AMQP type, value] each
	}
	if err := decodeNumbers(out, &raw); err != nil {
		return nil, err
	}
	qs := make([]queueInfo, 0, len(raw))
	for _, r := range raw {
		q := queueInfo{Name: r.Name, Type: r.Type, Durable: r.Durable, Exclusive: r.Exclusive == true, Policy: r.Policy, Args: map[string]any{}}
		for _, a := range r.Args {
			if len(a) == 3 {
				q.Args[fmt.Sprint(a[0])] = a[2]
			}
		}
		qs = append(qs, q)
	}
	return qs, nil
}

func decodePolicies(out []byte) ([]policy, error) {
	var raw []struct {
		Name       string          `json:"name"`
		Pattern    string          `json:"pattern"`
		ApplyTo    string          `json:"apply-to"`
		Priority   int             `json:"priority"`
		Definition json.RawMessage `json:"definition"`
	}
	if err := decodeNumbers(out, &raw); err != nil {
		return nil, err
	}
	ps := make([]policy, 0, len(raw))
	for _, r := range raw {
		// The definition is a JSON object, written as a string of JSON.
		def := r.Definition
		var s string
		if json.Unmarshal(def, &s) == nil {
			def = []byte(s)
		}
		p := policy{Name: r.Name, Pattern: r.Pattern, ApplyTo: r.ApplyTo, Priority: r.Priority}
		if err := decodeNumbers(def, &p.Definition); err != nil {
			return nil, fmt.Errorf("policy %q: definition %s: %w", r.Name, def, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func decodeNodes(out []byte) (map[string]string, error) {
	var raw struct {
		Versions map[string]struct {
			Version string `json:"rabbitmq_version"`
		} `json:"versions"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, err
	}
	nodes := map[string]string{}
	for n, v := range raw.Versions {
		nodes[n] = v.Version
	}
	return nodes, nil
}

func decodeFlags(out []byte) ([]flagInfo, error) {
	var fs []flagInfo
	err := json.Unmarshal(out, &fs)
	return fs, err
}

func decodeDeprecated(out []byte) ([]string, error) {
	var raw []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, err
	}
	var names []string
	for _, r := range raw {
		names = append(names, r.Name)
	}
	return names, nil
}

// decodeGlobalQoS is the names of vhost's channels with a global prefetch.
func decodeGlobalQoS(vhost string) func([]byte) ([]string, error) {
	return func(out []byte) ([]string, error) {
		var raw []struct {
			VHost  string `json:"vhost"`
			Name   string `json:"name"`
			Global int    `json:"global_prefetch_count"`
		}
		if err := json.Unmarshal(out, &raw); err != nil {
			return nil, err
		}
		var names []string
		for _, r := range raw {
			if r.VHost == vhost && r.Global > 0 {
				names = append(names, fmt.Sprintf("%s (global prefetch %d)", r.Name, r.Global))
			}
		}
		return names, nil
	}
}

// settingsRe reads the answer of settingsExpr: {{ok,134217728},{ok,1800000}},
// with undefined for a setting that is not there.
var settingsRe = regexp.MustCompile(`^\{(?:\{ok,(\d+)\}|undefined),(?:\{ok,(\d+)\}|undefined)\}$`)

const settingsExpr = "{application:get_env(rabbit, max_message_size), application:get_env(rabbit, consumer_timeout)}."

// settings reads the node's max_message_size and consumer_timeout (0 when
// unset), which no list command shows.
func (d *deployment) settings(ctx context.Context, ctl rabbitctl.Ctl) error {
	out, err := ctl.Run(ctx, "-q", "eval", settingsExpr)
	if err != nil {
		return err
	}
	m := settingsRe.FindSubmatch(bytes.Join(bytes.Fields(out), nil))
	if m == nil {
		return fmt.Errorf("eval: unexpected answer %q", out)
	}
	d.maxMessage, _ = strconv.ParseInt(string(m[1]), 10, 64)
	d.consumerTimeout, _ = strconv.ParseInt(string(m[2]), 10, 64)
	return nil
}

// decodeNumbers is json.Unmarshal keeping numbers as written.
func decodeNumbers(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}
