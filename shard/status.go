package shard

import "dsspmesh/shardapi"

// sendStatus answers an OpStatus probe: the applied index, the leader this
// replica knows (itself when it leads) and its term. A worker whose leader
// went silent asks every other replica at once and follows the newest
// term's answer (shardapi/leaderhint.go).
func (s *service) sendStatus(c *workerConn, req shardapi.Request) {
	c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK,
		Index: s.r.fsm.AppliedIndex(), Leader: string(s.r.Leader()), Term: s.r.raft.CurrentTerm()}, nil)
}
