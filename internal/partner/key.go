package partner

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/claimid"
)

// EditedHeader is the header table dlq puts on a copy of a claim a person
// edited before it was replayed (dlq serve's edit and retry), and
// EditedKey its field holding that copy's own Idempotency-Key:
// <message_id>+edit.<16 hex digits>, new for each edit.
const (
	EditedHeader = "x-eaimq-edited"
	EditedKey    = "idempotency_key"
)

// Key is the Idempotency-Key to send for a delivery whose dedup key is id
// (the message_id, as claim.Key chose it) and whose headers are h.
//
// It is id, except for an edited copy that carries its own key. An edit is
// another payload of the same claim, and a partner that follows the IETF
// draft (draft-ietf-httpapi-idempotency-key-header) answers a key reused
// with another payload 422, so the fixed claim would be rejected every
// time; its new key lets the partner take it as the new request it is.
// Dedup still keys on id: one claim, one record, whatever was edited.
//
// The edit's key is used only when it names this claim, id+"+edit."
// followed by something, and is an HTTP header value that travels
// unchanged (claimid.HeaderValue); otherwise id is sent, as for any copy.
// A key naming another claim would be worse than a reused one: a partner
// that honours keys answers a known key with its stored result, and the
// edited claim would be recorded as delivered without ever being
// processed.
func Key(id string, h amqp.Table) string {
	t, ok := h[EditedHeader].(amqp.Table)
	if !ok {
		return id
	}
	k, ok := t[EditedKey].(string)
	prefix := id + "+edit."
	if !ok || len(k) <= len(prefix) || !strings.HasPrefix(k, prefix) || claimid.HeaderValue(k) != nil {
		return id
	}
	return k
}

// EditKey is the Idempotency-Key of an edited copy whose message_id is id
// and whose body is body (dlq puts it in EditedHeader's EditedKey field).
// It is derived from both, so the same edit sent twice is one key, and
// another edit of the same claim is a new one.
func EditKey(id string, body []byte) string {
	sum := sha256.Sum256(body)
	return id + "+edit." + hex.EncodeToString(sum[:])[:16]
}
