package dlq

import (
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestDecodeTypedAsDecodeTable: the one-pass decoder that list reads the
// rows with gives what decodeTable (encoding/json's tree, then the types)
// gives, values and errors alike, for what encodeTable writes and for
// what a person could have written in the database by hand.
func TestDecodeTypedAsDecodeTable(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456789, time.UTC)
	enc, err := encodeTable(amqp.Table{
		"x-death": []any{amqp.Table{"queue": "claim.in", "reason": "rejected", "count": int64(2), "time": at,
			"routing-keys": []any{"claim"}}},
		"x-eaimq-replays": int32(1), "b": int8(-1), "B": uint8(2), "s": int16(-3), "u": uint16(4), "I": uint32(5),
		"f": float32(1.5), "d": float64(-2.25e-3), "yes": true, "no": false, "nil": nil, "bin": []byte{0, 0xff},
		"notutf8": "a\xffb", "dec": amqp.Decimal{Scale: 2, Value: -1234}, "nested": amqp.Table{"k": "v", "e": amqp.Table{}},
		"empty": []any{}, "quote\"d": "a \"b\" \\ \n \u00e9 \u2028 <&>", "ünï": "çödé",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{
		string(enc),
		`{"table":{}}`,
		" { \"table\" : { \"a\" : [ 1 , \"x\" ] , \"b\" : { \"int64\" : 7 } } } ",
		`{"table":{"a":"\u00e9\ud83d\ude00 \"q\" \/"}}`,
		`{"table":{"a\u0041":{"decimal":{"Scale":1,"VALUE":5}}}}`,
		`{"table":{"a":"x"}} trailing`,
		`{"table":{"a":"` + "\xff\xfe" + `"}}`,
		// errors, which both must refuse
		``, `"s"`, `[]`, `{"table":[]}`, `{"table":{"a":{"int8":300}}}`, `{"table":{"a":{"uint8":-1}}}`,
		`{"table":{"a":{"int64":"1"}}}`, `{"table":{"a":{"time":"yesterday"}}}`, `{"table":{"a":{"bytes":"!!"}}}`,
		`{"table":{"a":{"what":1}}}`, `{"table":{"a":{"int8":1,"int16":2}}}`, `{"table":{"a":1}}`,
		`{"table":{"a":"x"`, `{"table":{"a":"x}}`, `{"table":{"a" "x"}}`, `{"table":{"a":tru}}`,
		`{"table":{"a":{"decimal":{"scale":999}}}}`, `{"table":{"a":"` + "\x01" + `"}}`,
	} {
		want, werr := decodeTable([]byte(in))
		got, gerr := decodeTyped([]byte(in))
		if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(want, got) {
			t.Errorf("%q:\ndecodeTable %#v, %v\ndecodeTyped %#v, %v", in, want, werr, got, gerr)
		}
	}
}

// BenchmarkDecodeTyped: a dead letter's headers, as list decodes them a
// row at a time, by each decoder.
func BenchmarkDecodeTyped(b *testing.B) {
	h := []byte(`{"table":{"x-death":[{"table":{"count":{"int64":1},"exchange":"eai.claim","queue":"claim.in","reason":"rejected","routing-keys":["claim"],"time":{"time":"2026-12-02T09:00:02Z"}}}],"x-first-death-exchange":"eai.claim","x-first-death-queue":"claim.in","x-first-death-reason":"rejected"}}`)
	b.Run("typed", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeTyped(h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tree", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeTable(h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
