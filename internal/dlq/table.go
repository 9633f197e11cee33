package dlq

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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

// encodeTable is t as that JSON: the bytes encoding/json would make of
// the typed tree (members in the order of their names, its escapes), but
// written directly. dlq ingest encodes every dead letter's headers and
// properties, and building a tree of maps for json.Marshal to walk by
// reflection was a quarter of a row's CPU (TestEncodeTableAsMarshal
// holds the two to the same bytes).
func encodeTable(t amqp.Table) ([]byte, error) {
	return appendTyped(make([]byte, 0, 256), t)
}

// appendTyped appends v's typed JSON to dst.
func appendTyped(dst []byte, v any) ([]byte, error) {
	one := func(dst []byte, k string) []byte { return append(append(append(dst, `{"`...), k...), `":`...) }
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case string:
		if !utf8.ValidString(v) {
			dst = append(one(dst, "string64"), '"')
			return append(base64.StdEncoding.AppendEncode(dst, []byte(v)), `"}`...), nil
		}
		return appendString(dst, v), nil
	case int8:
		return append(strconv.AppendInt(one(dst, "int8"), int64(v), 10), '}'), nil
	case uint8:
		return append(strconv.AppendUint(one(dst, "uint8"), uint64(v), 10), '}'), nil
	case int16:
		return append(strconv.AppendInt(one(dst, "int16"), int64(v), 10), '}'), nil
	case uint16:
		return append(strconv.AppendUint(one(dst, "uint16"), uint64(v), 10), '}'), nil
	case int32:
		return append(strconv.AppendInt(one(dst, "int32"), int64(v), 10), '}'), nil
	case uint32:
		return append(strconv.AppendUint(one(dst, "uint32"), uint64(v), 10), '}'), nil
	case int64:
		return append(strconv.AppendInt(one(dst, "int64"), v, 10), '}'), nil
	case int:
		return append(strconv.AppendInt(one(dst, "int64"), int64(v), 10), '}'), nil
	case float32, float64:
		// Rare in headers, and encoding/json's float format (and its
		// refusal of NaN and the infinities) is the one to keep.
		f, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		k := "float64"
		if _, ok := v.(float32); ok {
			k = "float32"
		}
		return append(append(one(dst, k), f...), '}'), nil
	case time.Time:
		dst = append(one(dst, "time"), '"')
		return append(v.UTC().AppendFormat(dst, time.RFC3339Nano), `"}`...), nil
	case []byte:
		dst = append(one(dst, "bytes"), '"')
		return append(base64.StdEncoding.AppendEncode(dst, v), `"}`...), nil
	case amqp.Decimal:
		dst = strconv.AppendUint(append(one(dst, "decimal"), `{"scale":`...), uint64(v.Scale), 10)
		return append(strconv.AppendInt(append(dst, `,"value":`...), int64(v.Value), 10), "}}"...), nil
	case amqp.Table:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(one(dst, "table"), '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendString(dst, k), ':')
			var err error
			if dst, err = appendTyped(dst, v[k]); err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
		}
		return append(dst, "}}"...), nil
	case []any:
		dst = append(dst, '[')
		for i, x := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendTyped(dst, x); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	}
	return nil, fmt.Errorf("a value of type %T", v)
}

// appendString appends s as encoding/json writes a string: quoted, with
// its escapes (HTML's <, > and & included, U+2028 and U+2029, a byte
// that is not UTF-8 as U+FFFD).
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(append(dst, s[start:i]...), '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(dst, s[start:]...), '"')
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
