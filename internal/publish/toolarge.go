package publish

import (
	"fmt"
	"regexp"
	"strconv"

	"eaimq/internal/broker"
)

// tooLargeRe reads the broker's refusal of a message above its
// max_message_size, the same text on 3.x and 4.x.
var tooLargeRe = regexp.MustCompile(`message size (\d+) is larger than configured max size (\d+)`)

// brokerMax is the broker's max_message_size when err is its refusal of a
// message larger than that (406 PRECONDITION_FAILED, which closes the
// channel), else 0.
func brokerMax(err error) int64 {
	if err == nil || broker.Code(err) != 406 {
		return 0
	}
	m := tooLargeRe.FindStringSubmatch(broker.Reason(err))
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[2], 10, 64)
	return n
}

// refusedTooLarge marks, after the broker refused a message above its
// max_message_size (limit), every claim published and unconfirmed that is
// larger: the broker refused it, certainly not queued (nacked, with the
// reason). The others published on that channel stay unconfirmed.
func (b *batch) refusedTooLarge(limit int64) {
	for i, r := range b.results {
		if c := &b.claims[i]; r.outcome == unconfirmed && int64(c.size) > limit {
			b.results[i] = result{outcome: nacked, reason: fmt.Sprintf("refused by the broker: %d bytes, more than its max_message_size of %d "+
				"(RabbitMQ 4.x's default is 16 MiB; rabbitmq.conf can raise it)", c.size, limit)}
		}
	}
}

// tooLargeError is the run's error when the broker refused a claim above
// its max_message_size: a Data error, as a claim larger than -max-bytes
// is, with what to do.
func tooLargeError(limit int64, s *Summary) error {
	return fmt.Errorf("the broker refuses messages larger than its max_message_size of %d bytes, and closed the channel: "+
		"%d claim(s) refused, %d published but not confirmed (publishing them again is safe). Raise max_message_size in the broker's "+
		"rabbitmq.conf, or keep claims within it (publish -max-bytes %d refuses them before anything is sent)", limit, s.Nacked, s.Unconfirmed, limit)
}
