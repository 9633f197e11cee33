// Package nodestatus is what brokerstatus does: it asks a RabbitMQ node
// for its status with rabbitmqctl, saves the text as the lab does, reads
// the memory watermark exactly from the JSON, checks it against the
// absolute size wanted, and prints a summary with the queues of a vhost.
package nodestatus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Status is what brokerstatus reads out of `rabbitmqctl status --formatter
// json`: the JSON, not the text, because the text prints the watermark in
// gigabytes to four decimals (512MiB reads 0.5369 gb, and so do 536.9 MB
// and a dozen sizes around it), while the JSON gives the setting exactly,
// in bytes or as the fraction.
type Status struct {
	Version   string
	Watermark Watermark
	Alarms    []Alarm
}

// Watermark is the node's vm_memory_high_watermark setting.
type Watermark struct {
	Absolute   bool    // {"absolute": bytes} rather than {"relative": fraction}
	Bytes      int64   // the absolute setting, when Absolute
	Fraction   float64 // the relative setting, when not
	LimitBytes int64   // what the node computed the setting to (vm_memory_high_watermark_limit)
}

// String is the setting as the summary shows it.
func (w Watermark) String() string {
	if w.Absolute {
		return fmt.Sprintf("absolute %s (%d bytes)", FormatSize(w.Bytes), w.Bytes)
	}
	return fmt.Sprintf("relative %g of available memory, computed to %d bytes", w.Fraction, w.LimitBytes)
}

// Alarm is one entry of the status's "alarms", as RabbitMQ 3.10 prints it:
// {"type": "resource_limit", "resource": "memory", "node": "rabbit@localhost"}.
type Alarm struct {
	Type     string `json:"type"`
	Resource string `json:"resource,omitempty"`
	Node     string `json:"node,omitempty"`
}

func (a Alarm) String() string {
	if a.Type == "resource_limit" && a.Resource != "" {
		return fmt.Sprintf("%s alarm on node %s", a.Resource, a.Node)
	}
	if a.Node != "" {
		return fmt.Sprintf("%s on node %s", a.Type, a.Node)
	}
	return a.Type
}

// ParseStatus reads rabbitmqctl status --formatter json. It fails when the
// output is not one JSON object or its watermark setting is missing or
// unreadable, since the check cannot do without it.
func ParseStatus(out []byte) (Status, error) {
	var raw struct {
		Version string          `json:"rabbitmq_version"`
		Setting json.RawMessage `json:"vm_memory_high_watermark_setting"`
		Limit   json.Number     `json:"vm_memory_high_watermark_limit"`
		Alarms  []Alarm         `json:"alarms"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Status{}, fmt.Errorf("cannot read rabbitmqctl status --formatter json: %w", err)
	}
	s := Status{Version: raw.Version, Alarms: raw.Alarms}
	if len(raw.Setting) == 0 || string(raw.Setting) == "null" {
		return s, errors.New(`rabbitmqctl status --formatter json has no "vm_memory_high_watermark_setting"`)
	}
	w, err := parseSetting(raw.Setting)
	if err != nil {
		return s, fmt.Errorf("vm_memory_high_watermark_setting %s: %w", raw.Setting, err)
	}
	if raw.Limit != "" {
		if w.LimitBytes, err = strconv.ParseInt(string(raw.Limit), 10, 64); err != nil {
			return s, fmt.Errorf("vm_memory_high_watermark_limit %s: not a whole number of bytes", raw.Limit)
		}
	}
	s.Watermark = w
	return s, nil
}

// parseSetting reads {"absolute": 536870912} or {"relative": 0.4}.
// RabbitMQ 3.10 gives bytes even for vm_memory_high_watermark.absolute =
// 512MiB in rabbitmq.conf (checked on a node started with it); should a
// version pass the size on as written ("512MiB"), it is read with the
// units RabbitMQ reads. A bare number is a relative setting, as RabbitMQ
// keeps a fraction.
func parseSetting(raw json.RawMessage) (Watermark, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return Watermark{}, err
	}
	if n, ok := v.(json.Number); ok {
		return relative(n)
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return Watermark{}, errors.New(`want {"absolute": bytes} or {"relative": fraction}`)
	}
	if val, ok := m["relative"]; ok {
		n, ok := val.(json.Number)
		if !ok {
			return Watermark{}, errors.New("the relative setting is not a number")
		}
		return relative(n)
	}
	val, ok := m["absolute"]
	if !ok {
		return Watermark{}, errors.New(`want {"absolute": bytes} or {"relative": fraction}`)
	}
	var b int64
	var err error
	switch val := val.(type) {
	case json.Number:
		b, err = strconv.ParseInt(string(val), 10, 64)
		if err != nil || b < 1 {
			return Watermark{}, fmt.Errorf("the absolute setting %s is not a whole number of bytes", val)
		}
	case string:
		if b, err = ParseSize(val); err != nil {
			return Watermark{}, err
		}
	default:
		return Watermark{}, errors.New("the absolute setting is neither a number nor a size")
	}
	return Watermark{Absolute: true, Bytes: b}, nil
}

func relative(n json.Number) (Watermark, error) {
	f, err := n.Float64()
	if err != nil || f < 0 || math.IsInf(f, 0) {
		return Watermark{}, fmt.Errorf("the relative setting %s is not a fraction", n)
	}
	return Watermark{Fraction: f}, nil
}

// CheckWatermark says whether the setting is exactly the absolute size
// wantBytes.
func CheckWatermark(w Watermark, wantBytes int64) (ok bool, why string) {
	want := fmt.Sprintf("%s (%d bytes)", FormatSize(wantBytes), wantBytes)
	if !w.Absolute {
		return false, fmt.Sprintf("the memory watermark is relative (%g of available memory, computed to %d bytes), not the absolute %s wanted", w.Fraction, w.LimitBytes, want)
	}
	if w.Bytes != wantBytes {
		return false, fmt.Sprintf("the memory watermark is absolute %s (%d bytes), not the %s wanted", FormatSize(w.Bytes), w.Bytes, want)
	}
	return true, ""
}
