package packet

import (
	"math/rand/v2"
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// Toxic types of our own, registered with toxiproxy: what a TCP stream
// sees of packet loss, and a half-open link. Neither drops a byte, since
// TCP never does: a dropped byte would desynchronize the protocol over
// the stream, a failure no network causes.
const (
	lossType = "splitbrain_loss"
	holdType = "splitbrain_hold"
)

// RTO is the retransmission timeout a lost segment costs a stream (Linux's
// minimum, 200 ms), doubled for each further loss of the same segment.
const RTO = 200 * time.Millisecond

func init() {
	toxics.Register(lossType, new(lossToxic))
	toxics.Register(holdType, new(holdToxic))
}

// lossToxic delays each chunk, with probability Percent/100 per
// transmission, by a retransmission timeout that doubles for every loss of
// the same chunk (at most 10): packet loss as a TCP stream sees it.
type lossToxic struct {
	Percent float64 `json:"percent"`
	// RTO is the first retransmission timeout, in milliseconds.
	RTO int64 `json:"rto"`
}

// delay draws the delay of one chunk.
func (t *lossToxic) delay() time.Duration {
	var d time.Duration
	rto := time.Duration(t.RTO) * time.Millisecond
	for range 10 {
		if rand.Float64()*100 >= t.Percent {
			break
		}
		d += rto
		rto *= 2
	}
	return d
}

// Pipe implements toxics.Toxic.
func (t *lossToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if d := t.delay(); d > 0 {
				select {
				case <-time.After(d):
				case <-stub.Interrupt:
					stub.Output <- c // removed: deliver it now, lose nothing
					return
				}
			}
			stub.Output <- c
		}
	}
}

// holdToxic passes nothing while it is in force and sends no reset: the
// connection stays up, each side's writes succeed, and nothing arrives.
// When it is removed, what it held is delivered, as TCP delivers what it
// retransmits once a black-holed path comes back.
type holdToxic struct{}

// Pipe implements toxics.Toxic.
func (t *holdToxic) Pipe(stub *toxics.ToxicStub) {
	var held []*stream.StreamChunk
	for {
		select {
		case <-stub.Interrupt:
			for _, c := range held {
				stub.Output <- c
			}
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			held = append(held, c)
		}
	}
}
