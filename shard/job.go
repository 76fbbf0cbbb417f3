package shard

import "dsspmesh/shardapi"

// job is what an Init entry fixed: that the shard is initialised, and its
// spec, which every sub-machine reads. Its section is the header's first
// keys, init and spec.
type job struct {
	initialized bool
	spec        shardapi.Spec
}

func (j *job) save(h *header) error {
	h.put("init", j.initialized)
	h.put("spec", j.spec)
	return nil
}

// load reads the job; an initialised one's spec must be valid.
func (j *job) load(h *header) error {
	if _, err := h.get("init", &j.initialized); err != nil {
		return err
	}
	if _, err := h.get("spec", &j.spec); err != nil {
		return err
	}
	return nil
}
