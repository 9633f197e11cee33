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

// TestLeanHeadersAsTyped: what list reads of a row's headers without
// decoding them all (decodeHeadersLean) gives parseHeaders the same
// fields as decodeTyped's whole table: x-death's first entry among
// several, the replays, the deliveries, an edit and a purge, and a
// header of every type skipped; and it refuses what decodeTyped refuses,
// a bad value in a header it skips included (deadOfRowLean's caller then
// reads the row whole, as before).
func TestLeanHeadersAsTyped(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456789, time.UTC)
	death := func(q string, n int64) amqp.Table {
		return amqp.Table{"queue": q, "reason": "rejected", "count": n, "time": at, "exchange": "eai.claim",
			"routing-keys": []any{"claim"}, "original-expiration": "100"}
	}
	tables := []amqp.Table{
		{"x-death": []any{death("claim.in", 2), death("other", 5)}, "x-eaimq-replays": int32(1), "x-delivery-count": int64(3),
			"b": int8(-1), "B": uint8(2), "s": int16(-3), "u": uint16(4), "I": uint32(5),
			"f": float32(1.5), "d": float64(-2.25e-3), "yes": true, "no": false, "nil": nil, "bin": []byte{0, 0xff},
			"notutf8": "a\xffb", "dec": amqp.Decimal{Scale: 2, Value: -1234}, "nested": amqp.Table{"k": "v", "e": amqp.Table{}},
			"empty": []any{}, "quote\"d": "a \"b\" \\ \n \u00e9 \u2028 <&>"},
		{editHeader: amqp.Table{"at": at, "by": "ann", "via": "cli", "previous_sha256": "ab", "k": []any{int8(1)}},
			purgedHeader: amqp.Table{"at": at, "by": "bob", "via": "page", "from_queue": "claim.in", "reason": "expired",
				"dead_lettered_at": at, "count": int64(4)}},
		{"x-death": []any{}, "x-delivery-count": int32(0)},
		{"x-death": "not a list", "x-eaimq-replays": "x"},
		{"x-death": []any{"not a table", death("claim.in", 1)}},
		{},
	}
	var ins []string
	for _, h := range tables {
		enc, err := encodeTable(h)
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, string(enc))
	}
	ins = append(ins,
		" { \"table\" : { \"x-death\" : [ { \"table\" : { \"queue\" : \"q\" , \"count\" : { \"int64\" : 7 } } } , \"x\" ] } } ",
		`{"table":{"x-death":[{"table":{"queue":"a"}}],"x-death":[{"table":{"queue":"b"}}]}}`,
		`{"table":{"x-eaimq-replays":{"int64":2},"x-eaimq-replays":{"int8":1}}}`,
		`{"table":{"x-death":[{ "table":{"queue":"a","queue":"b"}}]}}`,
		`{"table":{"a":{"decimal":{"Scale":1,"VALUE":5}},"x-delivery-count":{"int64":1}}} trailing`,
		// errors, which both refuse
		``, `"s"`, `[]`, `{"table":[]}`, `{"tablex":{}}`, `{"table":{"a":{"what":1}}}`, `{"table":{"a":{"int8":1,"int16":2}}}`,
		`{"table":{"a":1}}`, `{"table":{"a":"x"`, `{"table":{"a":"x}}`, `{"table":{"a" "x"}}`, `{"table":{"a":tru}}`,
		`{"table":{"a":"`+"\x01"+`"}}`, `{"table":{"x-death":[{"table":{"count":{"int64":"1"}}}]}}`,
		`{"table":{"x-death":[{"table":{}},{"int8":}]}}`,
		`{"table":{"a":{"int8":300}}}`, `{"table":{"a":{"uint8":-1}}}`, `{"table":{"a":{"int64":"1"}}}`,
		`{"table":{"a":{"time":"yesterday"}}}`, `{"table":{"a":{"bytes":"!!"}}}`, `{"table":{"a":{"decimal":{"scale":999}}}}`,
		`{"table":{"a":"\q"}}`, `{"table":{"a\q":"x"}}`, `{"table":{"n":{"table":{"a\q":"x"}}}}`,
		`{"table":{"x-death":[{"table":{}},{"table":{"time":{"time":"now"}}}]}}`,
		// and what both read
		`{"table":{"a":{"\u0069nt8":1},"x-delivery-count":{"\u0069nt8":2}}}`, `{"table":{"a":"\u00e9\n"}}`,
	)
	fields := func(h amqp.Table) *dead {
		m := &dead{d: amqp.Delivery{Headers: h}}
		parseHeaders(m)
		m.d = amqp.Delivery{}
		return m
	}
	var lt leanTables // one for all, as a walk has: each row's own tables
	for _, in := range ins {
		whole, werr := decodeTyped([]byte(in))
		lean, lerr := lt.decodeHeadersLean([]byte(in))
		switch {
		case werr != nil && lerr == nil:
			t.Errorf("%q: decodeTyped refuses it (%v), decodeHeadersLean reads it", in, werr)
		case werr == nil && lerr != nil:
			t.Errorf("%q: decodeHeadersLean refuses what decodeTyped reads: %v", in, lerr)
		case werr == nil && !reflect.DeepEqual(fields(whole), fields(lean)):
			t.Errorf("%q:\nwhole %+v\nlean  %+v", in, fields(whole), fields(lean))
		}
	}
}

// BenchmarkDecodeHeadersLean: the same headers as BenchmarkDecodeTyped,
// as list reads them.
func BenchmarkDecodeHeadersLean(b *testing.B) {
	h := []byte(`{"table":{"x-death":[{"table":{"count":{"int64":1},"exchange":"eai.claim","queue":"claim.in","reason":"rejected","routing-keys":["claim"],"time":{"time":"2026-12-02T09:00:02Z"}}}],"x-first-death-exchange":"eai.claim","x-first-death-queue":"claim.in","x-first-death-reason":"rejected"}}`)
	b.ReportAllocs()
	var lt leanTables
	for b.Loop() {
		if _, err := lt.decodeHeadersLean(h); err != nil {
			b.Fatal(err)
		}
	}
}
