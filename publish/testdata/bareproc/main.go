// Bareproc is the ceiling for one publish process in BenchmarkPublishProcess:
// dial, a confirming channel, one persistent mandatory publish, its
// confirm, close; no file, no checks.
package main

import (
	"os"

	amqp "github.com/rabbitmq/amqp091-go"
)

func main() {
	c, err := amqp.Dial(os.Getenv("EAI_AMQP_URL"))
	if err != nil {
		os.Exit(69)
	}
	ch, err := c.Channel()
	if err != nil || ch.Confirm(false) != nil {
		os.Exit(69)
	}
	dc, err := ch.PublishWithDeferredConfirm("eai.claim", "claim", true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: "one", ContentType: "application/json", Body: []byte(`{"guid":"one"}`)})
	if err != nil || !dc.Wait() {
		os.Exit(1)
	}
	c.Close()
}
