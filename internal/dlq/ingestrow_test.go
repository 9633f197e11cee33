package dlq

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"pgregory.net/rapid"
)

// TestParseOnceAsThrice: the one parse of a body gives the guid and the
// "is a JSON object" that ingestion read by two more parses before:
// guidOf's, and an unmarshal into a map (which takes null too).
func TestParseOnceAsThrice(t *testing.T) {
	check := func(t interface{ Fatalf(string, ...any) }, body []byte) {
		m := parse(amqp.Delivery{Body: body}, false)
		var obj map[string]json.RawMessage
		if want := json.Unmarshal(body, &obj) == nil; m.object != want {
			t.Fatalf("%q: object %v, want %v", body, m.object, want)
		}
		if want := guidOf(body); m.guid != want {
			t.Fatalf("%q: guid %q, want %q", body, m.guid, want)
		}
	}
	for _, b := range []string{``, ` `, `{}`, ` {"guid":"g"} `, `null`, ` null`, `nul`, `[]`, `"s"`, `1`, `true`, `{"guid":1}`,
		`{"claimId":1,"guid":"g"}`, `{"guid":"g","claimId":{}}`, `{"GUID":"g"}`, `{"guid":"g"`, `{"guid":"g"} x`, `{"guid":"a\u00e9\ud800"}`,
		`{"guid":"g","guid":"h"}`, "\t\r\n{\"guid\":null}", `{"guid":"g","docs":[1,{"a":[]}]}`} {
		check(t, []byte(b))
	}
	rapid.Check(t, func(t *rapid.T) {
		// Bodies near JSON: fragments of claims put together at random.
		parts := rapid.SliceOf(rapid.SampledFrom([]string{`{`, `}`, `[`, `]`, `"guid"`, `"claimId"`, `:`, `,`, `"g"`, `1`, `null`,
			`true`, ` `, `"\u00e9"`, "\xff", `"`})).Draw(t, "parts")
		check(t, []byte(strings.Join(parts, "")))
	})
}

// benchDead is a dead letter of about 1 KiB as RabbitMQ 3.10 leaves it in
// claim.dead: its x-death, and the x-first-death-* headers beside it.
func benchDead(i int) amqp.Delivery {
	id := fmt.Sprintf("ing-%06d", i)
	at := time.Now().Truncate(time.Second)
	return amqp.Delivery{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json", Timestamp: at,
		Headers: amqp.Table{
			"x-death": []any{amqp.Table{"queue": "claim.in", "reason": "rejected", "count": int64(1), "time": at,
				"exchange": "eai.claim", "routing-keys": []any{"claim"}}},
			"x-first-death-exchange": "eai.claim", "x-first-death-queue": "claim.in", "x-first-death-reason": "rejected"},
		Body: fmt.Appendf(nil, `{"guid":%q,"claimId":"C-%s","docs":[],"pad":%q}`, id, id, strings.Repeat("x", 934))}
}

// BenchmarkRowOf is the CPU dlq ingest spends making a dead letter's row
// (parse, copyKey, rowOf), the store's insert left out.
//
//	go test -run '^$' -bench RowOf -benchmem ./internal/dlq
func BenchmarkRowOf(b *testing.B) {
	ds := make([]amqp.Delivery, 1000)
	for i := range ds {
		ds[i] = benchDead(i)
	}
	now := time.Now()
	i := 0
	for b.Loop() {
		m := parse(ds[i%len(ds)], false)
		_ = rowOf(m, now)
		i++
	}
}
