package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestChooseLoopbackRanges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		want    loopbackRanges
		claimed []string // held by others
		bound   []string // with sockets bound in them
		out     loopbackRanges
		err     bool
	}{
		{name: "first up: the defaults", out: loopbackRanges{"127.64.0.0/16", "127.77.0.0/16"}},
		{name: "second up: the next blocks", claimed: []string{"127.64.0.0/16", "127.77.0.0/16"},
			out: loopbackRanges{"127.65.0.0/16", "127.78.0.0/16"}},
		{name: "blocks with sockets are skipped", bound: []string{"127.64.0.0/16", "127.78.0.0/16"},
			claimed: []string{"127.77.0.0/16"}, out: loopbackRanges{"127.65.0.0/16", "127.79.0.0/16"}},
		{name: "the service search never takes a pod block in use",
			claimed: []string{"127.64.0.0/16", "127.65.0.0/16", "127.66.0.0/16", "127.67.0.0/16", "127.68.0.0/16",
				"127.69.0.0/16", "127.70.0.0/16", "127.71.0.0/16", "127.72.0.0/16", "127.73.0.0/16", "127.74.0.0/16",
				"127.75.0.0/16", "127.76.0.0/16", "127.77.0.0/16"},
			out: loopbackRanges{"127.78.0.0/16", "127.79.0.0/16"}},
		{name: "recorded ranges are kept, even with sockets bound",
			want:  loopbackRanges{"127.90.0.0/16", "127.91.0.0/16"},
			bound: []string{"127.90.0.0/16", "127.91.0.0/16"}, out: loopbackRanges{"127.90.0.0/16", "127.91.0.0/16"}},
		{name: "a recorded range another up holds", want: loopbackRanges{"127.64.0.0/16", "127.77.0.0/16"},
			claimed: []string{"127.64.0.0/16"}, err: true},
		{name: "a given service range, a free pod range", want: loopbackRanges{ServiceClusterIPRange: "10.96.0.0/12"},
			out: loopbackRanges{"10.96.0.0/12", "127.77.0.0/16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := map[string]bool{}
			for _, c := range tc.claimed {
				held[c] = true
			}
			bound := map[string]bool{}
			for _, c := range tc.bound {
				bound[c] = true
			}
			claim := func(cidr string) error {
				if held[cidr] {
					return errRangeInUse
				}
				held[cidr] = true
				return nil
			}
			out, err := chooseLoopbackRanges(tc.want, claim, func(cidr string) bool { return bound[cidr] })
			if tc.err {
				if !errors.Is(err, errRangeInUse) {
					t.Fatalf("error %v, want errRangeInUse", err)
				}
				return
			}
			if err != nil || out != tc.out {
				t.Fatalf("got %+v, %v; want %+v", out, err, tc.out)
			}
		})
	}
}

// TestClaimLoopbackRanges claims for real, with a service range no `kplane up` picks by
// itself: a second claim of it fails until the first is released, the choice is recorded in
// the data dir, and a restart reads it back.
func TestClaimLoopbackRanges(t *testing.T) {
	const service = "127.201.0.0/16"
	first, second := t.TempDir(), t.TempDir()
	r, release, err := claimLoopbackRanges(first, service)
	if err != nil {
		t.Fatal(err)
	}
	if r.ServiceClusterIPRange != service || r.PodCIDR == "" {
		t.Fatalf("ranges %+v", r)
	}
	if _, _, err := claimLoopbackRanges(second, service); !errors.Is(err, errRangeInUse) {
		t.Fatalf("a second claim of %s: %v, want errRangeInUse", service, err)
	}
	release()
	again, release, err := claimLoopbackRanges(first, "")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if again != r {
		t.Errorf("after a restart %+v, want the recorded %+v", again, r)
	}
	if _, err := os.Stat(filepath.Join(first, rangesFile)); err != nil {
		t.Error(err)
	}
}

func TestRangeBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.202.3.4:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !rangeBound("127.202.0.0/16") {
		t.Error("127.202.0.0/16 not seen as bound with a listener on 127.202.3.4")
	}
	if rangeBound("127.203.0.0/16") {
		t.Error("127.203.0.0/16 seen as bound")
	}
}
