package partner

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestKey: an edited copy's own key is sent when it names this claim and
// travels as an HTTP header value; anything else falls back to the
// message_id.
func TestKey(t *testing.T) {
	edited := func(v any) amqp.Table {
		return amqp.Table{EditedHeader: amqp.Table{"at": time.Now(), "by": "dlq serve", EditedKey: v}}
	}
	const id = "5f0c-guid"
	for _, tc := range []struct {
		name string
		h    amqp.Table
		want string
	}{
		{"no headers", nil, id},
		{"not edited", amqp.Table{"traceparent": "x"}, id},
		{"edited by an older dlq (no key)", amqp.Table{EditedHeader: amqp.Table{"by": "dlq serve"}}, id},
		{"edited", edited(id + "+edit.0123456789abcdef"), id + "+edit.0123456789abcdef"},
		{"the key of another claim", edited("other-guid+edit.0123456789abcdef"), id},
		{"a prefix of the id only", edited(id + "+edit."), id},
		{"not a header value", edited(id + "+edit.01\n23"), id},
		{"trailing space", edited(id + "+edit.0123 "), id},
		{"not a string", edited(int32(7)), id},
		{"the header not a table", amqp.Table{EditedHeader: "yes"}, id},
	} {
		if got := Key(id, tc.h); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestPostSendsKey: the key given is the Idempotency-Key header, once.
func TestPostSendsKey(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Values("Idempotency-Key")
		w.WriteHeader(http.StatusConflict)
	}))
	defer srv.Close()
	a := New(srv.URL+"/v1/claims", 1, 5*time.Second).Post(context.Background(), []byte(`{}`), "", "g+edit.0123456789abcdef", "")
	if a.Status != 409 {
		t.Errorf("answer %+v, want 409", a)
	}
	if len(got) != 1 || got[0] != "g+edit.0123456789abcdef" {
		t.Errorf("Idempotency-Key %q", got)
	}
}
