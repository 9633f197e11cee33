package dlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"pgregory.net/rapid"
)

// TestTableRoundTrip: headers and properties come back from an ingested
// row with their values and AMQP types (x-death's count a long, its time
// a timestamp), strings that are not UTF-8 included.
func TestTableRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	in := amqp.Table{
		"x-death": []any{amqp.Table{"queue": "claim.in", "reason": "rejected", "count": int64(2), "time": at,
			"routing-keys": []any{"claim"}}},
		"x-eaimq-replays": int32(1), "b": int8(-1), "B": uint8(2), "s": int16(-3), "u": uint16(4), "I": uint32(5),
		"f": float32(1.5), "d": float64(2.25), "yes": true, "nil": nil, "bin": []byte{0, 0xff},
		"notutf8": "a\xffb", "dec": amqp.Decimal{Scale: 2, Value: 1234}, "nested": amqp.Table{"k": "v"},
	}
	b, err := encodeTable(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeTable(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n in %#v\nout %#v\n%s", in, out, b)
	}
	if _, err := encodeTable(amqp.Table{"c": complex(1, 2)}); err == nil {
		t.Error("a value of no AMQP type was encoded")
	}
}

// TestEncodeTableAsMarshal: encodeTable writes the bytes encoding/json
// made of the typed tree before it wrote them itself (rows ingested then
// and now are the same text), for every type and for strings with every
// escape encoding/json makes, keys included.
func TestEncodeTableAsMarshal(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	tables := []amqp.Table{
		{},
		{"x-death": []any{amqp.Table{"queue": "claim.in", "reason": "rejected", "count": int64(2), "time": at,
			"exchange": "eai.claim", "routing-keys": []any{"claim"}}}, "x-first-death-queue": "claim.in"},
		{"x-eaimq-replays": int32(1), "b": int8(-1), "B": uint8(2), "s": int16(-3), "u": uint16(4), "I": uint32(5), "i": 7,
			"f": float32(1.5), "d": float64(2.25e-300), "yes": true, "no": false, "nil": nil, "bin": []byte{0, 0xff}, "empty": []byte{},
			"notutf8": "a\xffb", "dec": amqp.Decimal{Scale: 2, Value: -1234}, "nested": amqp.Table{"k": "v", "": []any{}},
			"list": []any{nil, "x", int64(-9), []any{amqp.Table{}}}},
		{"esc<>&\"\\\b\f\n\r\t\x00\x1f\x7f": "<a href=\"x\">&amp;</a>\u2028\u2029é中\U0001F600 \x01", "κλειδί": "\\u0041"},
	}
	for _, in := range tables {
		got, err := encodeTable(in)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := typedRef(in)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("encodeTable(%#v):\n got %s\nwant %s", in, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		k, v := rapid.String().Draw(t, "k"), rapid.String().Draw(t, "v")
		raw := string(rapid.SliceOf(rapid.Byte()).Draw(t, "raw"))
		in := amqp.Table{k: v, "raw": raw, "list": []any{v, raw}}
		got, err := encodeTable(in)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := typedRef(in)
		want, _ := json.Marshal(ref)
		if !bytes.Equal(got, want) {
			t.Fatalf("encodeTable(%#v):\n got %s\nwant %s", in, got, want)
		}
	})
}

// typedRef is the tree encodeTable made for json.Marshal before it wrote
// the JSON itself: the reference TestEncodeTableAsMarshal holds it to.
func typedRef(v any) (any, error) {
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
			t, err := typedRef(x)
			if err != nil {
				return nil, err
			}
			m[k] = t
		}
		return one("table", m), nil
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			t, err := typedRef(x)
			if err != nil {
				return nil, err
			}
			l[i] = t
		}
		return l, nil
	}
	return nil, fmt.Errorf("a value of type %T", v)
}
