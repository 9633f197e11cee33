package dlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// decodeTable reads what encodeTable wrote through encoding/json's tree
// (numbers kept as their text), then the typed members from that tree.
// It was the rows' decoder until decodeTyped (typedjson.go) read them in
// one pass without the tree, at a third of the CPU over a million; it
// stays here as the tests' reference for what decodeTyped must give.
func decodeTable(b []byte) (amqp.Table, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	x, err := untyped(v)
	if err != nil {
		return nil, err
	}
	t, ok := x.(amqp.Table)
	if !ok {
		return nil, fmt.Errorf("not a table")
	}
	return t, nil
}

// untyped is the AMQP value of v, a value as json decodes it with
// UseNumber.
func untyped(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case []any:
		l := make([]any, len(x))
		for i, it := range x {
			y, err := untyped(it)
			if err != nil {
				return nil, err
			}
			l[i] = y
		}
		return l, nil
	case map[string]any:
		if len(x) != 1 {
			return nil, fmt.Errorf("a typed value has one member, not %d", len(x))
		}
		for k, r := range x {
			return member(k, r)
		}
	}
	return nil, fmt.Errorf("unexpected %v", v)
}

func member(k string, r any) (any, error) {
	num := func() string { n, _ := r.(json.Number); return string(n) }
	str := func() (string, error) {
		s, ok := r.(string)
		if !ok {
			return "", fmt.Errorf("%s: %v is not a string", k, r)
		}
		return s, nil
	}
	integer := func(bits int) (int64, error) { return strconv.ParseInt(num(), 10, bits) }
	unsigned := func(bits int) (uint64, error) { return strconv.ParseUint(num(), 10, bits) }
	switch k {
	case "int8":
		n, err := integer(8)
		return int8(n), err
	case "uint8":
		n, err := unsigned(8)
		return uint8(n), err
	case "int16":
		n, err := integer(16)
		return int16(n), err
	case "uint16":
		n, err := unsigned(16)
		return uint16(n), err
	case "int32":
		n, err := integer(32)
		return int32(n), err
	case "uint32":
		n, err := unsigned(32)
		return uint32(n), err
	case "int64":
		return integer(64)
	case "float32":
		f, err := strconv.ParseFloat(num(), 32)
		return float32(f), err
	case "float64":
		return strconv.ParseFloat(num(), 64)
	case "time":
		s, err := str()
		if err != nil {
			return nil, err
		}
		return time.Parse(time.RFC3339Nano, s)
	case "bytes", "string64":
		s, err := str()
		if err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if k == "string64" {
			return string(b), err
		}
		return b, err
	case "decimal":
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("decimal: %v", r)
		}
		var d amqp.Decimal
		for f, x := range m {
			n, _ := x.(json.Number)
			switch strings.ToLower(f) {
			case "scale":
				v, err := strconv.ParseUint(string(n), 10, 8)
				if err != nil {
					return nil, fmt.Errorf("decimal: %w", err)
				}
				d.Scale = uint8(v)
			case "value":
				v, err := strconv.ParseInt(string(n), 10, 32)
				if err != nil {
					return nil, fmt.Errorf("decimal: %w", err)
				}
				d.Value = int32(v)
			}
		}
		return d, nil
	case "table":
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("table: %v", r)
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
