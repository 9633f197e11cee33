package topo

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/fail"
)

// Explain turns a failed declaration (err, from Declare, DeclareFor or a
// *DeclareError of the caller's) in vhost into a message that says what
// differs, what the contract of queue type kind wants, and what to do. A
// 406 or 403 is Config; anything else Unavailable.
func Explain(conn *amqp.Connection, err error, vhost string, kind QueueType) error {
	var de *DeclareError
	if !errors.As(err, &de) {
		return fail.New(fail.Unavailable, err)
	}
	switch broker.Code(err) {
	case 406:
		// A queue of the other type is not a mistake to delete: it is the
		// same queue, claims and all, and -migrate moves them.
		// (Only the contract's own queues have a type to compare with: a
		// delay queue of -retry-delays that differs is the general case.)
		if de.Kind == "queue" && (de.Name == Queue || de.Name == DeadQueue) {
			if st, ierr := InspectQueue(conn, de.Name); ierr == nil && st.Type == kind.Other() {
				return fail.Errorf(fail.Config, "%s", typePlan(de.Name, vhost, st, kind))
			}
		}
		if de.Kind == "queue" && de.Name == ArchiveQueue {
			return fail.Errorf(fail.Config, "%s", archivePlan(de, vhost, broker.Reason(err)))
		}
		return fail.Errorf(fail.Config, "%s %s already exists in vhost %q with other properties: %s\n"+
			"  wanted: %s\n"+
			"  remedy: an existing %s cannot be changed in place. If it is empty, delete it\n"+
			"          (rabbitmqctl -p %s delete_%s %s) and run topology again; if it holds\n"+
			"          claims, move them out first (a shovel): deleting a queue deletes its messages",
			de.Kind, de.Name, vhost, broker.Reason(err), de.Object, de.Kind, vhost, de.Kind, de.Name)
	case 403:
		return fail.Errorf(fail.Config, "%s: access refused in vhost %q: %s (the user needs configure permission)", de.Object, vhost, broker.Reason(err))
	}
	return fail.New(fail.Unavailable, err)
}

// typePlan is the message for a queue that exists with the other type:
// what is there, why it cannot simply be redeclared, and the command that
// moves it.
func typePlan(queue, vhost string, st QueueState, want QueueType) string {
	return fmt.Sprintf("queue %s in vhost %q is a %s queue holding %d ready claim(s); -queue-type %s wants a %s queue\n"+
		"  a queue's type cannot be changed in place, and deleting it would delete its claims.\n"+
		"  plan: stop the consumers, then run\n"+
		"          topology -migrate %s\n"+
		"        with the same EAI_AMQP_URL. It moves every claim of claim.in and claim.dead into\n"+
		"        %s queues of the same names, each confirmed in the new queue before it leaves\n"+
		"        the old one, and can be run again if it stops midway.",
		queue, vhost, st.Type, st.Messages, want, want, want, want)
}

// archivePlan is the message for an archive queue that exists with other
// properties, usually another retention: the purged claims it holds are
// the only copies left, so the first remedy keeps them.
func archivePlan(de *DeclareError, vhost, reason string) string {
	return fmt.Sprintf("queue %s already exists in vhost %q with other properties: %s\n"+
		"  wanted: %s\n"+
		"  remedy: give topology the -archive-retention it was declared with (the broker's \"current is\"\n"+
		"          value above, in milliseconds), or -archive-retention 0 to leave it alone; to change\n"+
		"          the retention, restore what it holds that you still need (dlq restore), then delete it\n"+
		"          (rabbitmqctl -p %s delete_queue %s) and run topology again: deleting it deletes the\n"+
		"          purged claims it keeps",
		de.Name, vhost, reason, de.Object, vhost, de.Name)
}
