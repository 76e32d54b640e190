package harness

import (
	"github.com/splitbrain/splitbrain/targets"
)

// Backends resolves a target's name to its backend's declaration;
// [targets.Lookup], every registered backend, when nil.
type Backends func(name string) (targets.Backend, error)

// backend looks the config's target up among bs, as bad input when it is
// unknown.
func (c Config) backend(bs Backends) (targets.Backend, error) {
	if bs == nil {
		bs = targets.Lookup
	}
	b, err := bs(c.Target)
	if err != nil {
		return targets.Backend{}, &InputError{Err: err}
	}
	return b, nil
}
