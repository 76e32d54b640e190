package harness

import (
	"github.com/splitbrain/splitbrain/nemesis/clock"
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

// clockShims says, for each of b's roles that runs under the LD_PRELOAD
// clock shim, how the clock nemesis asks its process the time; the other
// roles' processes are skewed by vDSO injection.
func clockShims(b targets.Backend) map[string]clock.Shim {
	out := map[string]clock.Shim{}
	for _, r := range b.Roles {
		if r.Clock.Shim {
			out[r.Name] = clock.Shim{Now: r.Clock.Now}
		}
	}
	return out
}
