package clientmeta

import (
	"errors"
	"net/netip"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	public := []string{"8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8"}
	refused := []string{
		"10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.0.1",
		"169.254.169.254", "169.254.0.1", "100.64.0.1", "100.127.255.254",
		"0.0.0.0", "0.1.2.3", "255.255.255.255", "240.0.0.1", "224.0.0.1", "239.255.255.250",
		"192.0.0.8", "192.0.2.1", "198.18.0.1", "198.51.100.1", "203.0.113.1",
		"127.0.0.1", "127.1.2.3", "::1", "::", "::ffff:127.0.0.1",
		"::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:192.168.1.1", "::ffff:100.64.0.1",
		"::a00:1", "::ffff:0:a00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1", "2002:a00:1::1", "2001:0:4136:e378::1",
		"2001:db8::1", "100::1", "fc00::1", "fd12:3456::1", "fe80::1", "fe80::1%eth0", "fec0::1", "ff02::1", "ff05::2",
	}
	for _, s := range public {
		if err := checkAddr(netip.MustParseAddr(s), false, false); err != nil {
			t.Errorf("%s refused: %v", s, err)
		}
	}
	for _, s := range refused {
		if err := checkAddr(netip.MustParseAddr(s), false, false); err == nil {
			t.Errorf("%s accepted", s)
		}
	}
	if checkAddr(netip.Addr{}, true, false) == nil {
		t.Error("the zero address accepted")
	}
	for _, s := range []string{"127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"} {
		if err := checkAddr(netip.MustParseAddr(s), true, false); err != nil {
			t.Errorf("loopback allowed, %s refused: %v", s, err)
		}
		if err := checkAddr(netip.MustParseAddr(s), true, true); err != nil {
			t.Errorf("loopback only, %s refused: %v", s, err)
		}
	}
	// Plain http reaches loopback only, never a public address.
	if checkAddr(netip.MustParseAddr("8.8.8.8"), true, true) == nil {
		t.Error("loopback only: a public address accepted")
	}
}

// TestControlChecksTheDialledAddress checks the last line of defence: the
// Control function the sockets are connected under refuses what the policy
// refuses, whatever a lookup said before.
func TestControlChecksTheDialledAddress(t *testing.T) {
	d := &dialer{allowLoopback: false}
	control := d.netDialer(false).Control
	for _, address := range []string{"10.0.0.1:443", "[::ffff:169.254.169.254]:443", "127.0.0.1:8443", "[fe80::1%eth0]:443"} {
		var addrErr *addressError
		if err := control("tcp", address, nil); !errors.As(err, &addrErr) {
			t.Errorf("Control(%s) = %v, want an address refusal", address, err)
		}
	}
	if err := control("tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("Control(8.8.8.8:443) = %v", err)
	}
	if err := control("tcp", "not an address", nil); err == nil {
		t.Error("Control accepted an unparsable address")
	}
	loopbackOnly := (&dialer{allowLoopback: true}).netDialer(true).Control
	if err := loopbackOnly("tcp", "8.8.8.8:80", nil); err == nil {
		t.Error("plain http's Control accepted a public address")
	}
	if err := loopbackOnly("tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("plain http's Control refused loopback: %v", err)
	}
}
