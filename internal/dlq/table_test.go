package dlq

import (
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
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
