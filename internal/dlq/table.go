package dlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A message's headers and properties as an ingested row keeps them: JSON
// that a person can read in the database, and that gives back each
// value's AMQP type (x-death's count is a long, its time a timestamp), so
// that a dead letter read from the database is the message claim.dead
// held. A string, a bool, a list and null are themselves; every other
// value is an object of one member that names its type:
//
//	{"int64": 3}  {"time": "2026-12-02T03:04:05Z"}  {"table": {...}}
//	{"bytes": "base64"}  {"string64": "base64"} (a string that is not UTF-8)

// encodeTable is t as that JSON.
func encodeTable(t amqp.Table) ([]byte, error) {
	v, err := typed(t)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func typed(v any) (any, error) {
	one := func(k string, v any) map[string]any { return map[string]any{k: v} }
	switch v := v.(type) {
	case nil, bool:
		return v, nil
	case string:
		if !utf8.ValidString(v) {
			return one("string64", base64.StdEncoding.EncodeToString([]byte(v))), nil
		}
		return v, nil
	case int8:
		return one("int8", v), nil
	case uint8:
		return one("uint8", v), nil
	case int16:
		return one("int16", v), nil
	case uint16:
		return one("uint16", v), nil
	case int32:
		return one("int32", v), nil
	case uint32:
		return one("uint32", v), nil
	case int64:
		return one("int64", v), nil
	case int:
		return one("int64", int64(v)), nil
	case float32:
		return one("float32", v), nil
	case float64:
		return one("float64", v), nil
	case time.Time:
		return one("time", v.UTC().Format(time.RFC3339Nano)), nil
	case []byte:
		return one("bytes", base64.StdEncoding.EncodeToString(v)), nil
	case amqp.Decimal:
		return one("decimal", map[string]any{"scale": v.Scale, "value": v.Value}), nil
	case amqp.Table:
		m := make(map[string]any, len(v))
		for k, x := range v {
			t, err := typed(x)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			m[k] = t
		}
		return one("table", m), nil
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			t, err := typed(x)
			if err != nil {
				return nil, err
			}
			l[i] = t
		}
		return l, nil
	}
	return nil, fmt.Errorf("a value of type %T", v)
}

// decodeTable reads what encodeTable wrote.
func decodeTable(b []byte) (amqp.Table, error) {
	var raw json.RawMessage = b
	v, err := untyped(raw)
	if err != nil {
		return nil, err
	}
	t, ok := v.(amqp.Table)
	if !ok {
		return nil, fmt.Errorf("not a table")
	}
	return t, nil
}

func untyped(raw json.RawMessage) (any, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case []any:
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, err
		}
		l := make([]any, len(items))
		for i, it := range items {
			x, err := untyped(it)
			if err != nil {
				return nil, err
			}
			l[i] = x
		}
		return l, nil
	case map[string]any:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		if len(m) != 1 {
			return nil, fmt.Errorf("a typed value has one member, not %d", len(m))
		}
		for k, r := range m {
			return member(k, r)
		}
	}
	return nil, fmt.Errorf("unexpected %s", raw)
}

func member(k string, r json.RawMessage) (any, error) {
	var err error
	num := func(p any) any { err = json.Unmarshal(r, p); return p }
	switch k {
	case "int8":
		return *num(new(int8)).(*int8), err
	case "uint8":
		return *num(new(uint8)).(*uint8), err
	case "int16":
		return *num(new(int16)).(*int16), err
	case "uint16":
		return *num(new(uint16)).(*uint16), err
	case "int32":
		return *num(new(int32)).(*int32), err
	case "uint32":
		return *num(new(uint32)).(*uint32), err
	case "int64":
		return *num(new(int64)).(*int64), err
	case "float32":
		return *num(new(float32)).(*float32), err
	case "float64":
		return *num(new(float64)).(*float64), err
	case "time":
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, err
		}
		return time.Parse(time.RFC3339Nano, s)
	case "bytes", "string64":
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if k == "string64" {
			return string(b), err
		}
		return b, err
	case "decimal":
		var d struct {
			Scale uint8
			Value int32
		}
		if err := json.Unmarshal(r, &d); err != nil {
			return nil, err
		}
		return amqp.Decimal{Scale: d.Scale, Value: d.Value}, nil
	case "table":
		var m map[string]json.RawMessage
		if err := json.Unmarshal(r, &m); err != nil {
			return nil, err
		}
		t := make(amqp.Table, len(m))
		for k, x := range m {
			v, err := untyped(x)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			t[k] = v
		}
		return t, nil
	}
	return nil, fmt.Errorf("unknown type %q", k)
}

// properties are a delivery's AMQP properties, as a table.
func properties(d amqp.Delivery) amqp.Table {
	t := amqp.Table{}
	set := func(k, v string) {
		if v != "" {
			t[k] = v
		}
	}
	set("content_type", d.ContentType)
	set("content_encoding", d.ContentEncoding)
	set("correlation_id", d.CorrelationId)
	set("reply_to", d.ReplyTo)
	set("expiration", d.Expiration)
	set("message_id", d.MessageId)
	set("type", d.Type)
	set("user_id", d.UserId)
	set("app_id", d.AppId)
	if d.DeliveryMode != 0 {
		t["delivery_mode"] = d.DeliveryMode
	}
	if d.Priority != 0 {
		t["priority"] = d.Priority
	}
	if !d.Timestamp.IsZero() {
		t["timestamp"] = d.Timestamp
	}
	return t
}

// withProperties sets d's properties from t (properties' table).
func withProperties(d *amqp.Delivery, t amqp.Table) {
	str := func(k string) string { s, _ := t[k].(string); return s }
	d.ContentType, d.ContentEncoding, d.CorrelationId = str("content_type"), str("content_encoding"), str("correlation_id")
	d.ReplyTo, d.Expiration, d.MessageId = str("reply_to"), str("expiration"), str("message_id")
	d.Type, d.UserId, d.AppId = str("type"), str("user_id"), str("app_id")
	d.DeliveryMode, _ = t["delivery_mode"].(uint8)
	d.Priority, _ = t["priority"].(uint8)
	d.Timestamp, _ = t["timestamp"].(time.Time)
}
