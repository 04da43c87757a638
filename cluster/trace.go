package cluster

import (
	"time"

	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/sim"
)

// OpKind is what one traced operation did.
type OpKind uint8

const (
	// OpDecide: request Index was routed (route.Router.Decide) with prompt Tokens.
	OpDecide OpKind = iota + 1
	// OpFirstToken: the first token of request Index arrived (route.Ticket.FirstToken); its
	// prefill entry ended.
	OpFirstToken
	// OpRelease: request Index ended, finished with Output tokens (route.Ticket.Finish) or
	// failed with Output 0 (route.Ticket.Cancel); its booking ended.
	OpRelease
	// OpEvent: engine Worker published a KV event that reached the index.
	OpEvent
	// OpPrefillDone: the prefill leg of remote request Index ended (the sidecar's
	// x-condisagg-prefill-ms on the response headers); its prefill entry ended.
	OpPrefillDone
)

// Op is one operation of a run on the router or the index, at virtual time At. Replaying the
// ops of a run in order against another router and index (the server's, say) must give the
// same decision records; that is how the simulator is held to the production pipeline.
type Op struct {
	Kind    OpKind
	At      time.Duration
	Index   int          // request index (decide, release)
	Tokens  []uint32     // OpDecide: the prompt
	Subset  []string     // OpDecide: the request's subset hint (nil: none)
	Model   string       // OpDecide: the request's model name ("": the base model)
	Session string       // OpDecide: the request's session id ("": none)
	Record  route.Record // OpDecide: the decision
	Err     error        // OpDecide: the routing error, if any
	Booking string       // the ops after OpDecide: the request's booking
	Output  int          // OpRelease: the output tokens of a finished request (0: it failed)

	Worker string    // OpEvent: the publishing engine
	Event  sim.Event // OpEvent (its slices are the run's own)
}

// RouterSeed is the route.Options.Seed a run with cfg.Seed uses: the tie-break randomness of
// every decision of the run follows from it.
func RouterSeed(seed uint64) uint64 {
	const salt = 0x636c7573746572
	if s := seed ^ salt; s != 0 { // route.Options.Seed 0 would mean "seed from the clock"
		return s
	}
	return salt
}
