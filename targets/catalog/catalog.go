// Package catalog lists the lock backends splitbrain knows: the targets the
// harness can bring up and the lock recipes client agents can run.
package catalog

import (
	"slices"

	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/etcd"
	"github.com/splitbrain/splitbrain/targets/lockd"
	"github.com/splitbrain/splitbrain/targets/redis"
)

// Targets returns every target by name.
func Targets() map[string]targets.Target {
	return map[string]targets.Target{
		"redis": redis.Target{},
		"etcd":  etcd.Target{},
		"lockd": lockd.Target{},
	}
}

// TargetNames lists the targets' names, sorted.
func TargetNames() []string {
	var out []string
	for n := range Targets() {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Lockers returns every lock recipe by kind.
func Lockers() map[string]targets.LockerFactory {
	return map[string]targets.LockerFactory{
		"redis": redis.NewLocker,
		"etcd":  etcd.NewLocker,
		"lockd": lockd.NewLocker,
	}
}
