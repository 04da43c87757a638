// Package route is the one request pipeline: every routing decision condisagg makes, for a
// live request (through extproc), for Explain and for the cluster simulator, is made by
// Router.Decide.
//
//	body ─ParseBody─> tokens (tokenizer) ─> block keys (kvindex.AppendKeys) ─> overlap
//	(kvindex.Index.Overlap) ─> snapshot (pool.Pool.Snapshot, subset hint) ─> policy.Decide
//	─> deadline check ─> commit: pool.Pool.Book, one demotion on a denied bypass ─> Outcome
//
// Every booked Outcome carries a Ticket, the request's life after the decision: the response
// phase (extproc, the simulator) reports the answer's events to it, and it releases what the
// decision booked and teaches the Learner (package feedback). Fallback routes requests that get
// no policy decision (booked, by load, with a ticket). Outcome.Record is the decision record: the comparable part of a decision, which
// the golden test (internal/golden) uses to prove the server and the simulator decide alike.
//
// A request carries either an OpenAI body (parsed once here, then tokenized) or, from the
// simulator, the prompt's token ids. Tie-breaks draw from PCG(Seed, n) for the n-th decision,
// so a request sequence decides the same way on any goroutine.
//
// A Router serves one or more models (Options.Models), each with its own tokenizer, block
// size, index, pool and event streams; the request's `model` field (or an adapter name of a
// model) selects the model, and a name no model serves is refused (ErrUnknownModel) or passed
// through by load, per Options.UnknownModel. Every model runs the same Decide.
//
// The log of the last decisions and the placement mix (the admin status page's, Admin
// Recent's) is not kept here: package decisionlog records Outcomes, and imports route for
// that, never the other way.
//
// Concurrency: a Router is safe for concurrent use; the policy config is swapped atomically.
// Imports: tokenizer, kvindex, policy, pool, feedback;
// never extproc, decisionlog, cluster, kvevents or cmd.
package route
